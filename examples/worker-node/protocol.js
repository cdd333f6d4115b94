// Wire details of the toolbus protocol (docs/protocol.md) that do not depend
// on NATS: header names, token and agent rules, deadlines, durations, and the
// argument checks with the Go host's error format.

import Ajv2020 from "ajv/dist/2020.js";

/** Header names. nats.go matches them case-sensitively: use them exactly. */
export const Header = Object.freeze({
  turn: "Toolbus-Turn",
  call: "Toolbus-Call",
  agent: "Toolbus-Agent",
  task: "Toolbus-Task",
  deadline: "Toolbus-Deadline",
  truncated: "Toolbus-Truncated",
  traceparent: "traceparent",
});

/** The outcomes a host may reply with (§6). */
export const Outcome = Object.freeze({
  ok: "ok",
  error: "error",
  invalid: "invalid",
  stopped: "stopped",
  timeout: "timeout",
  panic: "panic",
  unavailable: "unavailable",
});

/** Subject names (§1). */
export const toolSubject = (category, tool) => `toolbus.tool.${category}.${tool}`;
export const eventSubject = (turn, call, kind) => `toolbus.turn.${turn}.evt.${call}.${kind}`;
export const allAborts = "toolbus.turn.*.abort";
// Where a host says it started or is stopping, so catalogs refresh at once.
export const catalogChanged = "toolbus.catalog.changed";
export const serviceName = (category) => `toolbus-${category}`;
export const queueGroup = (category) => `toolbus.${category}`;

/**
 * validToken is bus.ValidToken: one subject token, non-empty, with no '.',
 * '*', '>', whitespace or control character.
 */
export function validToken(s) {
  return typeof s === "string" && /^[^.*>\s\p{Cc}]+$/u.test(s);
}

/** validAgent: the Toolbus-Agent rule, [A-Za-z0-9_-]{1,128}. */
export function validAgent(s) {
  return /^[A-Za-z0-9_-]{1,128}$/.test(s);
}

/**
 * truncatedHeader reports whether a Toolbus-Truncated value says the
 * arguments were cut off: anything but absent, empty or "false".
 */
export function truncatedHeader(v) {
  return v !== undefined && v !== null && v !== "" && v !== "false";
}

const rfc3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|[+-](\d{2}):(\d{2}))$/;

/**
 * parseDeadline parses an absolute RFC 3339 time with an optional fraction
 * (turns send 9 digits at most; like Go's time.Parse, any number is taken)
 * and returns it
 * in milliseconds since the epoch (with a fraction: sub-millisecond digits
 * are kept as far as a double holds them). It throws on anything else.
 */
export function parseDeadline(s) {
  const m = rfc3339.exec(s);
  if (!m) {
    throw new Error("not an RFC 3339 time (want e.g. 2026-11-30T18:00:00.123456789Z)");
  }
  const [year, month, day, hour, min, sec] = m.slice(1, 7).map(Number);
  const daysIn = new Date(Date.UTC(year, month, 0)).getUTCDate();
  if (month < 1 || month > 12) throw new Error(`month ${m[2]} out of range`);
  if (day < 1 || day > daysIn) throw new Error(`day ${m[3]} out of range`);
  if (hour > 23) throw new Error(`hour ${m[4]} out of range`);
  if (min > 59) throw new Error(`minute ${m[5]} out of range`);
  if (sec > 59) throw new Error(`second ${m[6]} out of range`);
  let offsetMin = 0;
  if (m[8] !== "Z") {
    const oh = Number(m[9]), om = Number(m[10]);
    if (oh > 23 || om > 59) throw new Error(`time zone offset ${m[8]} out of range`);
    offsetMin = (m[8][0] === "-" ? -1 : 1) * (oh * 60 + om);
  }
  // Date.UTC maps years 0-99 to 1900-1999; setUTCFullYear does not.
  const d = new Date(Date.UTC(2000, month - 1, day, hour, min, sec));
  d.setUTCFullYear(year);
  const frac = m[7] ? Number(`0.${m[7]}`) * 1000 : 0;
  return d.getTime() + frac - offsetMin * 60_000;
}

/**
 * goDuration formats milliseconds as Go's time.Duration.String does
 * ("500ms", "2s", "1m30s", "1h0m0s", "1.5s"): the syntax of the `timeout`
 * endpoint metadata.
 */
export function goDuration(ms) {
  if (!Number.isFinite(ms) || ms < 0) throw new Error(`bad duration ${ms}`);
  if (ms === 0) return "0s";
  if (ms < 1000) return `${trimFrac(ms.toFixed(6))}ms`;
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = trimFrac(((ms % 60_000) / 1000).toFixed(9));
  if (h > 0) return `${h}h${m}m${s}s`;
  if (m > 0) return `${m}m${s}s`;
  return `${s}s`;
}

function trimFrac(s) {
  return s.includes(".") ? s.replace(/\.?0+$/, "") : s;
}

/** The JSON type of a value, as the Go host names it in its messages. */
function jsonType(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v; // string, boolean, object
}

const maxLeaves = 10;

/**
 * ArgumentError lists where arguments break the schema. Its message is the
 * Go host's (schema.ValidationError): "arguments do not match the schema:"
 * then one "- <path>: <message>" line per failure, paths as JSON pointers
 * with "/" for the root, sorted, at most ten.
 */
export class ArgumentError extends Error {
  constructor(leaves) {
    leaves = [...leaves].sort((a, b) => cmp(a.path, b.path) || cmp(a.message, b.message));
    leaves = leaves.filter((l, i) => i === 0 || l.path !== leaves[i - 1].path || l.message !== leaves[i - 1].message);
    let text = "arguments do not match the schema:";
    for (const [i, l] of leaves.entries()) {
      if (i === maxLeaves) {
        text += `\n... and ${leaves.length - maxLeaves} more`;
        break;
      }
      text += `\n- ${l.path}: ${l.message}`;
    }
    super(text);
    this.leaves = leaves;
  }
}

const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

// One compiler for every schema: draft 2020-12, every failure reported,
// failing values attached (verbose) for the messages. Nothing loads remote
// schemas: no loadSchema is configured, so a remote $ref fails to compile.
const ajv = new Ajv2020({ allErrors: true, verbose: true, strict: true });

/**
 * compileArgs compiles a tool's parameter schema (its root must be an
 * object schema) into a function that parses and checks a request body and
 * returns the arguments object, or throws an ArgumentError.
 */
export function compileArgs(schema) {
  if (schema?.type !== "object") {
    throw new Error("function tool parameters must use a root object schema");
  }
  const validate = ajv.compile(schema);
  return (body) => {
    const text = body.trim() === "" ? "{}" : body; // an empty body means {}
    let args;
    try {
      args = JSON.parse(text);
    } catch (err) {
      throw new ArgumentError([{ path: "/", message: `not valid JSON: ${err.message}` }]);
    }
    if (jsonType(args) !== "object") {
      throw new ArgumentError([{ path: "/", message: `value is ${jsonType(args)} but should be object` }]);
    }
    if (!validate(args)) {
      throw new ArgumentError(validate.errors.map(leaf));
    }
    return args;
  };
}

// leaf turns one ajv error into a path and a message worded like the Go
// host's, where the two differ.
function leaf(e) {
  let path = e.instancePath;
  let message = e.message;
  switch (e.keyword) {
    case "required":
      message = `required property '${e.params.missingProperty}' is missing`;
      break;
    case "additionalProperties":
      path += "/" + String(e.params.additionalProperty).replaceAll("~", "~0").replaceAll("/", "~1");
      message = "property is not allowed (not declared in the schema)";
      break;
    case "type":
      message = `value is ${jsonType(e.data)} but should be ${[].concat(e.params.type).join(" or ")}`;
      break;
  }
  return { path: path || "/", message };
}
