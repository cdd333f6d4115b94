// A toolbus category host: serves the tools of one category as a NATS micro
// service and follows docs/protocol.md §2-§8, in the order of the Go host
// (actors/host.go).

import { headers as natsHeaders, nuid } from "@nats-io/transport-node";
import { Svcm } from "@nats-io/services";

import {
  Header, Outcome, allAborts, bytesOf, catalogChanged, compileArgs, eventSubject, formatDeadline, goDuration, nowNs,
  parseToolRequest, queueGroup, serviceName, text, toolSubject,
} from "./protocol.js";

/** The version every toolbus host reports (actors.Version). */
export const VERSION = "0.1.0";
/** The host's own limit for a tool without a timeout (the runtime default). */
export const DEFAULT_TIMEOUT_MS = 2 * 60_000;
/** How long a stopping host waits for its cancelled calls to reply. */
export const STOP_GRACE_MS = 5_000;

const TRUNCATED = "arguments were cut off (truncated); re-issue the call with the complete arguments";
const STOPPING = "the category host is stopping";
// setTimeout fires at once for longer delays.
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * ToolError is a failure a tool reports on purpose: outcome `error` with the
 * message as the reply's `error`, like an error returned by a Go tool. Any
 * other exception is a fault of the tool: outcome `panic`.
 */
export class ToolError extends Error {}

/**
 * sleep waits ms milliseconds, or less if signal aborts first. It never
 * rejects: a tool looks at signal.aborted afterwards.
 */
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

// Why a call's signal fired. The outcome and the error text follow from it.
const cause = {
  deadline: () => ({ outcome: Outcome.timeout, text: "context deadline exceeded" }),
  // The reply's abort is the one that stopped the call: the turn of the subject, with
  // the reason and who asked as sent (protocol.md §9).
  abort: (turn, reason, by) => ({
    outcome: Outcome.stopped,
    text: reason ? `the turn was aborted: ${reason}` : "the turn was aborted",
    abort: { turn_id: turn, ...(reason ? { reason } : {}), ...(by ? { by } : {}) },
  }),
  stopping: () => ({ outcome: Outcome.stopped, text: STOPPING }),
};

/**
 * Host serves the tools of one category.
 *
 * A tool is a plain object:
 *   name, description, schema (a JSON Schema object, root type "object"),
 *   mode ("parallel" | "sequential"), readOnly, destructive, strict,
 *   deferLoading, timeoutMs (optional), namespace, namespaceDescription,
 *   activity(args) -> label, completed(args, result) -> label,
 *   execute(args, ctx) -> Promise<result>
 * where ctx = { signal, call: {turn, id, agent, task, deadline, traceparent},
 * progress(label, data) } and a result is { content?: [{type, text}] | string,
 * details?, isError? }.
 */
export class Host {
  constructor({ nc, category, node, tools, log }) {
    this.nc = nc;
    this.category = category;
    this.node = node;
    this.log = log;
    this.tools = tools.map((t) => ({ ...t, parse: compileArgs(t.schema) }));
    this.stats = new Map(this.tools.map((t) => [t.name, { inflight: 0, ok: 0, errors: 0, execute_ns: 0 }]));
    this.running = new Map(); // turn id -> Set of AbortController: what an abort cancels
    this.calls = new Set(); // promises of every call in flight
    this.stopping = false;
  }

  /** start registers the micro service, its endpoints and the abort subscription. */
  async start() {
    const c = this.category;
    this.service = await new Svcm(this.nc).add({
      name: serviceName(c),
      version: VERSION,
      description: `toolbus tool category ${c}`,
      metadata: { category: c, node: this.node },
      // The default ("q") is replaced on every endpoint below: nats.js
      // refuses a service-level queue with a dot in it.
      statsHandler: async (ep) => ({ ...this.stats.get(ep.name) }),
    });
    for (const tool of this.tools) {
      this.service.addEndpoint(tool.name, {
        subject: toolSubject(c, tool.name),
        queue: queueGroup(c),
        metadata: endpointMetadata(tool),
        handler: (err, msg) => {
          if (err) {
            this.log.error("endpoint failed", { tool: tool.name, err: err.message });
            return;
          }
          // The handler must return at once: each call runs on its own, or a
          // slow call would hold back every request behind it.
          try {
            this.begin(tool, msg);
          } catch (e) {
            this.log.error("request not handled", { tool: tool.name, err: e?.stack ?? String(e) });
          }
        },
      });
    }
    this.abortSub = this.nc.subscribe(allAborts, {
      callback: (err, msg) => {
        if (err) {
          this.log.error("abort subscription failed", { err: err.message });
          return;
        }
        this.abort(msg);
      },
    });
    // Interest must reach the server before anyone is told the host is up.
    await this.nc.flush();
    this.announce("up");
    return this.service;
  }

  /** announce tells the bus's catalogs that this host started ("up") or is stopping ("down"). */
  announce(state) {
    try {
      this.nc.publish(catalogChanged, JSON.stringify({ category: this.category, node: this.node, state }));
    } catch (e) {
      this.log.warn("announce to catalogs", { state, err: e?.message ?? String(e) });
    }
  }

  /** abort cancels every call of the turn named by an abort's subject. */
  abort(msg) {
    const turn = msg.subject.split(".")[2];
    let reason = "", by = "";
    try {
      const body = msg.data.length ? JSON.parse(new TextDecoder().decode(msg.data)) : {};
      if (typeof body?.reason === "string") reason = body.reason;
      if (typeof body?.by === "string") by = body.by;
    } catch {
      // The body is optional and informational.
    }
    const acs = this.running.get(turn);
    if (!acs) return;
    this.log.info("abort", { turn, reason, calls: acs.size });
    for (const ac of acs) ac.abort(cause.abort(turn, reason, by));
  }

  /**
   * stop: new requests get `unavailable`, calls in flight are cancelled
   * (outcome `stopped`) and get up to STOP_GRACE_MS to reply, then the
   * service and the abort subscription go.
   */
  async stop() {
    if (this.stopping) return;
    this.stopping = true;
    for (const acs of this.running.values()) {
      for (const ac of acs) ac.abort(cause.stopping());
    }
    for (const ac of this.directCalls ?? []) ac.abort(cause.stopping());
    await this.service?.stop(); // drains: requests still queued are answered `unavailable`
    this.announce("down");
    let timer;
    const grace = new Promise((resolve) => { timer = setTimeout(() => resolve(false), STOP_GRACE_MS); });
    const settled = await Promise.race([Promise.allSettled([...this.calls]).then(() => true), grace]);
    clearTimeout(timer);
    if (!settled) this.log.warn("calls still running after stop; abandoning them", { grace: goDuration(STOP_GRACE_MS) });
    this.abortSub?.unsubscribe();
  }

  /**
   * begin checks a request as the Go host does, in its order: the headers,
   * truncation of a destructive tool, a deadline already past on arrival,
   * the host stopping. Then it starts the call; run checks the arguments.
   */
  begin(tool, msg) {
    const st = this.stats.get(tool.name);
    const { req, error } = parseToolRequest(this.headers(msg));
    const call = {
      turn: text(req.turn),
      id: text(req.call),
      agent: text(req.agent),
      task: text(req.task),
      traceparent: text(req.traceparent),
    };
    const now = Date.now();
    call.deadline = now + (tool.timeoutMs > 0 ? tool.timeoutMs : DEFAULT_TIMEOUT_MS);
    if (req.deadline !== null) call.deadline = Math.min(call.deadline, Number(req.deadline) / 1e6);
    if (call.id === "") call.id = nuid.next(); // a direct request, e.g. `nats req`
    const refuse = (outcome, err) => {
      st.errors++;
      this.reply(msg, { call_id: call.id, tool: tool.name, outcome, error: err });
    };
    if (error) return refuse(Outcome.invalid, error);
    // A turn refuses these itself; a direct request must not get past either.
    if (req.truncated && tool.destructive) return refuse(Outcome.invalid, TRUNCATED);
    // A request that waited out its deadline on the way: its caller has given up on it.
    if (req.deadline !== null && req.deadline <= nowNs()) {
      return refuse(Outcome.timeout, `deadline already past on arrival (${formatDeadline(req.deadline)}); the tool did not run`);
    }
    if (this.stopping) {
      // Not counted in the stats (§2).
      this.reply(msg, { call_id: call.id, tool: tool.name, outcome: Outcome.unavailable, error: STOPPING });
      return;
    }

    // One controller per call: the deadline, an abort of its turn and the
    // host stopping all end it, each with its own cause.
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(cause.deadline()), Math.min(Math.max(call.deadline - now, 0), MAX_TIMER_MS));
    const acs = call.turn ? this.running.get(call.turn) ?? new Set() : (this.directCalls ??= new Set());
    if (call.turn) this.running.set(call.turn, acs);
    acs.add(ac);
    const p = this.run(tool, msg, call, ac.signal)
      .catch((e) => this.log.error("call failed", { tool: tool.name, call: call.id, err: e?.stack ?? String(e) }))
      .finally(() => {
        clearTimeout(timer);
        acs.delete(ac);
        if (call.turn && acs.size === 0) this.running.delete(call.turn);
        this.calls.delete(p);
      });
    this.calls.add(p);
  }

  /**
   * headers reads a request's headers with rawHeaders, or, should the raw
   * block be missing (another nats.js), as nats.js decodes them.
   */
  headers(msg) {
    const get = rawHeaders(msg);
    if (get) return get;
    if (!this.warnedHeaders) {
      this.warnedHeaders = true;
      this.log.warn("the raw headers of requests are not available; reading them as nats.js decodes them");
    }
    return (name) => bytesOf(msg.headers?.get(name) ?? "");
  }

  /** run checks the arguments, executes the tool, replies, publishes events. */
  async run(tool, msg, call, signal) {
    const st = this.stats.get(tool.name);
    const reply = { call_id: call.id, tool: tool.name };
    const refuse = (outcome, error) => {
      st.errors++;
      this.reply(msg, { ...reply, outcome, error });
    };

    // Anyone on the bus can publish here: check again, and never repair.
    let args;
    try {
      args = tool.parse(new TextDecoder().decode(msg.data));
    } catch (err) {
      return refuse(Outcome.invalid, `invalid arguments for ${tool.name}: ${err.message}`);
    }

    const emit = (kind, label, data) => this.event(call, tool, kind, label, data);
    emit("started", safeLabel(() => tool.activity(args), tool.name));

    st.inflight++;
    const t0 = process.hrtime.bigint();
    let result, thrown;
    try {
      result = await tool.execute(args, { signal, call: { ...call }, progress: (label, data) => emit("progress", label, data) });
    } catch (err) {
      thrown = err ?? new Error("undefined thrown");
    }
    const durationNs = Number(process.hrtime.bigint() - t0);
    st.inflight--;
    st.execute_ns += durationNs;

    if (signal.aborted) {
      // Whatever execute did, its signal fired first: say why.
      const c = signal.reason;
      reply.outcome = c.outcome;
      reply.error = `call ${c.outcome}: ${c.text}` + (thrown ? ` (${thrown.message})` : "");
      // The reply may reach the turn before the abort does (another subject): it
      // carries the abort, so the turn takes it as one and asks its model nothing more
      // (protocol.md, the reply's `abort`).
      if (c.abort) reply.abort = c.abort;
    } else if (thrown instanceof ToolError) {
      reply.outcome = Outcome.error;
      reply.error = thrown.message;
    } else if (thrown) {
      this.log.error("tool threw", { tool: tool.name, turn: call.turn, call: call.id, err: thrown.stack ?? String(thrown) });
      reply.outcome = Outcome.panic;
      reply.error = `tool ${tool.name} failed internally: ${thrown.message ?? String(thrown)}`;
    } else {
      reply.outcome = result?.isError ? Outcome.error : Outcome.ok;
    }
    if (result && reply.outcome !== Outcome.panic) {
      const content = typeof result.content === "string" ? [{ type: "text", text: result.content }] : result.content;
      if (content?.length) reply.content = content;
      if (result.details !== undefined) reply.details = result.details;
    }
    if (reply.outcome === Outcome.ok) st.ok++;
    else st.errors++;
    reply.label = reply.outcome === Outcome.panic
      ? safeLabel(() => tool.activity(args), tool.name) + " (failed)"
      : safeLabel(() => tool.completed(args, result ?? {}, reply.outcome), tool.name) +
        (reply.outcome === Outcome.ok ? "" : ` (${reply.outcome})`);
    reply.duration_ns = durationNs;

    // The caller waits for the reply, not for the event: reply first.
    this.reply(msg, reply);
    emit("completed", reply.label);
  }

  /** event publishes an activity event of a call made by a turn (§7). */
  event(call, tool, kind, label, data) {
    if (!call.turn) return;
    const ev = { turn_id: call.turn, call_id: call.id, tool: tool.name, kind, label };
    if (data !== undefined) ev.data = data;
    ev.time = new Date().toISOString();
    const opts = {};
    if (call.traceparent) {
      opts.headers = natsHeaders();
      opts.headers.set(Header.traceparent, call.traceparent);
    }
    try {
      this.nc.publish(eventSubject(call.turn, call.id, kind), JSON.stringify(ev), opts);
    } catch (err) {
      this.log.warn("publish event", { turn: call.turn, call: call.id, kind, err: err.message });
    }
  }

  /**
   * reply answers a request with one ToolReply (§5), fields in the Go
   * order; a reply larger than the bus carries becomes a clear error.
   */
  reply(msg, r) {
    if (!msg.reply) return; // published without a reply subject: nobody to tell
    const out = {
      call_id: r.call_id, tool: r.tool, outcome: r.outcome,
      content: r.content, details: r.details, error: r.error, abort: r.abort, label: r.label,
      duration_ns: r.duration_ns ?? 0,
    };
    let b = new TextEncoder().encode(JSON.stringify(out));
    const limit = this.nc.info?.max_payload ?? 1 << 20;
    if (b.length > limit) {
      b = new TextEncoder().encode(JSON.stringify({
        call_id: r.call_id, tool: r.tool, outcome: Outcome.error,
        error: `tool ${r.tool} produced a result of ${b.length} bytes, more than the bus carries (${limit}); the result was dropped: ask for less output`,
        label: r.label, duration_ns: r.duration_ns ?? 0,
      }));
    }
    try {
      msg.respond(b);
    } catch (err) {
      this.log.warn("reply", { tool: r.tool, call: r.call_id, err: err.message });
    }
  }
}

/** endpointMetadata is a tool's Spec as endpoint metadata: all strings (§2). */
export function endpointMetadata(t) {
  const md = {
    description: t.description,
    schema: JSON.stringify(t.schema),
    mode: t.mode,
    read_only: String(Boolean(t.readOnly)),
    destructive: String(Boolean(t.destructive)),
    strict: String(Boolean(t.strict)),
  };
  if (t.namespace) {
    md.namespace = t.namespace;
    if (t.namespaceDescription) md.namespace_description = t.namespaceDescription;
  }
  if (t.deferLoading) md.defer_loading = "true";
  if (t.timeoutMs > 0) md.timeout = goDuration(t.timeoutMs);
  return md;
}

/**
 * rawHeaders returns a function that gives the first value of a request
 * header as a byte string ("" when absent), read as nats.go reads it: the
 * name matched exactly, spaces and tabs after the colon skipped, nothing
 * else trimmed, the bytes as sent. nats.js trims every Unicode space from
 * both ends of a value and decodes it as UTF-8: read that way, a value
 * such as "c1\v", or one with a byte that is not UTF-8, would pass checks
 * that the Go host refuses it in. The raw header block is taken from the
 * message the micro service wraps (nats-core's MsgImpl, of the versions
 * pinned in package.json); rawHeaders returns null when it is not there.
 */
export function rawHeaders(msg) {
  const inner = msg?.msg ?? msg;
  const len = inner?._msg?.hdr;
  const data = inner?._rdata;
  if (typeof len === "number" && data instanceof Uint8Array) {
    const first = new Map();
    if (len > 0) {
      const block = Buffer.from(data.buffer, data.byteOffset, len).toString("latin1");
      // nats.go's readMIMEHeader: the first line is the status line.
      for (let line of block.split("\n").slice(1)) {
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") break;
        const i = line.indexOf(":");
        if (i <= 0) continue;
        const key = line.slice(0, i);
        let j = i + 1;
        while (j < line.length && (line[j] === " " || line[j] === "\t")) j++;
        if (!first.has(key)) first.set(key, line.slice(j));
      }
    }
    return (name) => first.get(name) ?? "";
  }
  return null;
}

// A label function that throws must not cost the call its reply.
function safeLabel(fn, fallback) {
  try {
    const l = fn();
    return typeof l === "string" && l !== "" ? l : fallback;
  } catch {
    return fallback;
  }
}
