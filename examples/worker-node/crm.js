// The tools of category "crm": a small customer table and a few documents,
// in memory. The data is canned; the behaviour (errors, progress, aborts,
// deadlines, a destructive write) is real.

import { sleep } from "./host.js";

export const CATEGORY = "crm";
const NAMESPACE = "crm";
const NAMESPACE_DESCRIPTION =
  "Customer relationship management: look up customers, read their CRM documents, prepare reports and add notes to their records.";

// Every tool of the category shares its namespace.
const common = { namespace: NAMESPACE, namespaceDescription: NAMESPACE_DESCRIPTION, strict: false, deferLoading: false };

/** newStore returns the in-memory CRM: customers by id and documents by path. */
export function newStore() {
  return {
    customers: new Map([
      ["c1", { id: "c1", name: "Acme Corp", contact: "Ada Lovelace", email: "ada@acme.example", plan: "enterprise", since: "2021-03-14", notes: [] }],
      ["c2", { id: "c2", name: "Globex Ltd", contact: "Hank Scorpio", email: "hank@globex.example", plan: "team", since: "2023-07-01", notes: [] }],
      ["c3", { id: "c3", name: "Initech", contact: "Bill Lumbergh", email: "bill@initech.example", plan: "starter", since: "2025-01-20", notes: [] }],
    ]),
    documents: new Map([
      ["contracts/acme.md", "# Acme Corp: master agreement\n\nTerm: 2026-01-01 to 2028-12-31.\nSeats: 250, enterprise plan.\nRenewal: automatic unless cancelled 90 days before the end of the term.\n"],
      ["calls/globex-2026-05.txt", "Call with Hank Scorpio (Globex Ltd), 2026-05-12.\nWants single sign-on before moving 40 more seats to the team plan.\nFollow up in June.\n"],
      ["playbooks/onboarding.md", "# Onboarding playbook\n\n1. Welcome call within two days.\n2. Admin training in the first week.\n3. Health check after 30 days.\n"],
    ]),
  };
}

function describe(c) {
  const notes = c.notes.length
    ? c.notes.map((n) => `- ${n.at} (${n.by}): ${n.text}`).join("\n")
    : "(none)";
  return `Customer ${c.id}: ${c.name}\nContact: ${c.contact} <${c.email}>\nPlan: ${c.plan}, customer since ${c.since}\nNotes:\n${notes}`;
}

const known = (m) => [...m.keys()].join(", ");

/** tools returns the crm tools working on store. */
export function tools(store) {
  const lookupCustomer = {
    ...common,
    name: "lookup_customer",
    description: "Look up a customer of the CRM by id (c1, c2, ...): name, contact, plan and notes.",
    schema: {
      type: "object",
      properties: { id: { type: "string", description: "the customer id, e.g. c1" } },
      required: ["id"],
      additionalProperties: false,
    },
    strict: true,
    mode: "parallel",
    readOnly: true,
    destructive: false,
    activity: (a) => `Looking up customer ${a.id}`,
    completed: (a) => `Looked up customer ${a.id}`,
    async execute(a) {
      const c = store.customers.get(a.id);
      if (!c) {
        return { isError: true, content: `no customer with id ${JSON.stringify(a.id)}; the known ids are ${known(store.customers)}` };
      }
      return { content: describe(c), details: structuredClone(c) };
    },
  };

  const readFile = {
    ...common,
    // The same name as the built-in computer tool, on purpose: the turn
    // tells them apart by namespace (crm.read_file).
    name: "read_file",
    description: "Read a CRM document (a contract, call notes, a playbook) by its path in the CRM, e.g. contracts/acme.md. This reads the CRM, not the agent's files.",
    schema: {
      type: "object",
      properties: { path: { type: "string", description: "the document's path in the CRM" } },
      required: ["path"],
    },
    mode: "parallel",
    readOnly: true,
    destructive: false,
    activity: (a) => `Reading CRM document ${a.path}`,
    completed: (a) => `Read CRM document ${a.path}`,
    async execute(a) {
      const text = store.documents.get(a.path);
      if (text === undefined) {
        return { isError: true, content: `no CRM document ${JSON.stringify(a.path)}; the documents are ${known(store.documents)}` };
      }
      return { content: text, details: { path: a.path, bytes: new TextEncoder().encode(text).length } };
    },
  };

  const stepMs = 50;
  const slowReport = {
    ...common,
    name: "slow_report",
    description: "Prepare a revenue report over every customer; it takes the given number of seconds. Stops at its 5 s limit.",
    schema: {
      type: "object",
      properties: { seconds: { type: "number", minimum: 0, maximum: 3600, description: "how long the report takes" } },
      required: ["seconds"],
      additionalProperties: false,
    },
    mode: "parallel",
    readOnly: true,
    destructive: false,
    timeoutMs: 5000,
    activity: (a) => `Preparing a ${a.seconds} s report`,
    completed: (a, r) => r.details?.finished === false
      ? `Stopped the report after ${(r.details.elapsed_ms / 1000).toFixed(1)} s of ${a.seconds} s`
      : `Prepared a ${a.seconds} s report`,
    async execute(a, { signal, progress }) {
      const total = a.seconds * 1000;
      const start = Date.now();
      let lastProgress = start;
      // Small steps, each of which an abort or the deadline cuts short.
      while (Date.now() - start < total && !signal.aborted) {
        await sleep(Math.min(stepMs, total - (Date.now() - start)), signal);
        if (Date.now() - lastProgress >= 500 && !signal.aborted) {
          lastProgress = Date.now();
          progress(`Preparing the report: ${((lastProgress - start) / 1000).toFixed(1)} s of ${a.seconds} s`);
        }
      }
      const elapsed = Date.now() - start;
      if (signal.aborted) {
        return {
          content: `The report was not finished: stopped after ${(elapsed / 1000).toFixed(1)} s of ${a.seconds} s.`,
          details: { finished: false, elapsed_ms: elapsed, seconds: a.seconds },
        };
      }
      const byPlan = {};
      for (const c of store.customers.values()) byPlan[c.plan] = (byPlan[c.plan] ?? 0) + 1;
      const lines = Object.entries(byPlan).map(([plan, n]) => `- ${plan}: ${n} customer${n === 1 ? "" : "s"}`);
      return {
        content: `Report (${a.seconds} s): ${store.customers.size} customers\n${lines.join("\n")}`,
        details: { finished: true, elapsed_ms: elapsed, seconds: a.seconds, by_plan: byPlan },
      };
    },
  };

  const addNote = {
    ...common,
    name: "add_note",
    description: "Add a note to a customer's record in the CRM. The note is kept; it cannot be removed with these tools.",
    schema: {
      type: "object",
      properties: {
        customer: { type: "string", description: "the customer id, e.g. c1" },
        text: { type: "string", minLength: 1, maxLength: 2000, description: "the note" },
      },
      required: ["customer", "text"],
      additionalProperties: false,
    },
    strict: true,
    deferLoading: true,
    mode: "sequential",
    readOnly: false,
    destructive: true,
    activity: (a) => `Adding a note to customer ${a.customer}`,
    completed: (a) => `Added a note to customer ${a.customer}`,
    async execute(a, { call }) {
      const c = store.customers.get(a.customer);
      if (!c) {
        return { isError: true, content: `no customer with id ${JSON.stringify(a.customer)}; the known ids are ${known(store.customers)}` };
      }
      const note = { text: a.text, at: new Date().toISOString(), by: call.agent || "default", turn: call.turn || undefined, call: call.id };
      c.notes.push(note);
      return { content: `Added note ${c.notes.length} to customer ${c.id} (${c.name}).`, details: { customer: c.id, note, notes: c.notes.length } };
    },
  };

  return [lookupCustomer, readFile, slowReport, addNote];
}
