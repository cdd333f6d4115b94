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

// Header values are read as nats.go reads them (see rawHeaders in host.js):
// as bytes, which this file keeps in "byte strings", one character per byte
// (char codes 0-255), so that a value that is not valid UTF-8 is refused
// the way the Go host refuses it. bytesOf turns a JS string into one.

/** bytesOf is the UTF-8 encoding of s as a byte string. */
export function bytesOf(s) {
  return Buffer.from(s, "utf8").toString("latin1");
}

/**
 * decodeRune is Go's utf8.DecodeRuneInString at byte i of the byte string
 * b: [rune, size], or [0xFFFD, 1] where no valid UTF-8 sequence starts
 * (overlong forms, surrogates and code points above U+10FFFF included).
 */
export function decodeRune(b, i) {
  const c0 = b.charCodeAt(i);
  if (c0 < 0x80) return [c0, 1];
  let n, lo = 0x80, hi = 0xbf;
  if (c0 >= 0xc2 && c0 <= 0xdf) n = 2;
  else if (c0 === 0xe0) [n, lo] = [3, 0xa0];
  else if (c0 === 0xed) [n, hi] = [3, 0x9f];
  else if (c0 >= 0xe1 && c0 <= 0xef) n = 3;
  else if (c0 === 0xf0) [n, lo] = [4, 0x90];
  else if (c0 >= 0xf1 && c0 <= 0xf3) n = 4;
  else if (c0 === 0xf4) [n, hi] = [4, 0x8f];
  else return [0xfffd, 1];
  if (i + n > b.length) return [0xfffd, 1];
  const c1 = b.charCodeAt(i + 1);
  if (c1 < lo || c1 > hi) return [0xfffd, 1];
  let r = c0 & (0xff >> (n + 1));
  r = (r << 6) | (c1 & 0x3f);
  for (let k = 2; k < n; k++) {
    const c = b.charCodeAt(i + k);
    if (c < 0x80 || c > 0xbf) return [0xfffd, 1];
    r = (r << 6) | (c & 0x3f);
  }
  return [r, n];
}

// runes yields [rune, size, ok] for each rune of a byte string, as Go's
// range over a string does; ok is false for a byte that starts no valid
// sequence.
function* runes(b) {
  for (let i = 0; i < b.length;) {
    const [r, size] = decodeRune(b, i);
    yield [r, size, !(r === 0xfffd && size === 1), i];
    i += size;
  }
}

/**
 * text is a byte string as a JS string, each invalid byte replaced by
 * U+FFFD, as Go's encoding/json writes such a string into a reply.
 */
export function text(b) {
  let s = "";
  for (const [r] of runes(b)) s += String.fromCodePoint(r);
  return s;
}

// Go's unicode.IsPrint (strconv.IsPrint): letters, marks, numbers,
// punctuation, symbols and the ASCII space.
const printable = /^[\p{L}\p{M}\p{N}\p{P}\p{S} ]$/u;

function hex(n, width) {
  return n.toString(16).padStart(width, "0");
}

// escapeRune is strconv's appendEscapedRune for quote q.
function escapeRune(r, q) {
  const c = String.fromCodePoint(r);
  if (c === q || c === "\\") return "\\" + c;
  if (printable.test(c)) return c;
  switch (c) {
    case "\x07": return "\\a";
    case "\b": return "\\b";
    case "\f": return "\\f";
    case "\n": return "\\n";
    case "\r": return "\\r";
    case "\t": return "\\t";
    case "\v": return "\\v";
  }
  if (r < 0x20 || r === 0x7f) return "\\x" + hex(r, 2);
  if (r < 0x10000) return "\\u" + hex(r, 4);
  return "\\U" + hex(r, 8);
}

/** goQuote is Go's strconv.Quote of a byte string: how an error quotes a header value. */
export function goQuote(b) {
  let s = '"';
  for (const [r, , ok, i] of runes(b)) s += ok ? escapeRune(r, '"') : "\\x" + hex(b.charCodeAt(i), 2);
  return s + '"';
}

/** goQuoteRune is Go's strconv.QuoteRune. */
export function goQuoteRune(r) {
  return "'" + escapeRune(r, "'") + "'";
}

// Go's unicode.IsSpace (the White_Space property) and unicode.IsControl (Cc).
const spaceOrControl = /^[\p{White_Space}\p{Cc}]$/u;

/**
 * validToken is bus.ValidToken for a byte string: one subject token, valid
 * UTF-8, not empty, with no '.', '*', '>', white space or control
 * character. Unicode is allowed.
 */
export function validToken(b) {
  if (typeof b !== "string" || b === "") return false;
  for (const [r, , ok] of runes(b)) {
    if (!ok) return false;
    const c = String.fromCodePoint(r);
    if (c === "." || c === "*" || c === ">" || spaceOrControl.test(c)) return false;
  }
  return true;
}

/** MAX_ID_LEN is bus.MaxIDLen: the longest turn or call id, in bytes. */
export const MAX_ID_LEN = 128;

/** validID is bus.ValidID: a valid token of at most MAX_ID_LEN bytes. */
export function validID(b) {
  return typeof b === "string" && b.length <= MAX_ID_LEN && validToken(b);
}

/** MAX_AGENT_LEN is bus.MaxAgentLen, in bytes. */
export const MAX_AGENT_LEN = 64;

/**
 * checkAgent is bus.CheckAgent for a byte string: 1 to MAX_AGENT_LEN ASCII
 * letters, digits, '_' or '-'. It returns "" for a good id, else the Go
 * host's reason, word for word.
 */
export function checkAgent(b) {
  if (b === "") return "agent id is empty";
  if (b.length > MAX_AGENT_LEN) return `agent id is ${b.length} bytes long; at most ${MAX_AGENT_LEN} are allowed`;
  for (let i = 0; i < b.length; i++) {
    if (!/[A-Za-z0-9_-]/.test(b[i])) {
      // Every byte before i is ASCII, so i+1 is also the character's position.
      const [r, size] = decodeRune(b, i);
      const what = r === 0xfffd && size === 1 ? `byte 0x${hex(b.charCodeAt(i), 1)}` : goQuoteRune(r);
      return `agent id has ${what} at position ${i + 1}; only ASCII letters, digits, '_' and '-' are allowed`;
    }
  }
  return "";
}

/**
 * truncatedHeader reads a Toolbus-Truncated value (a byte string): only
 * absent, empty and "false" in any case mean the arguments are complete.
 * "Any case" is Go's strings.EqualFold, where 's' also matches 'ſ' (U+017F).
 */
export function truncatedHeader(b) {
  if (b === undefined || b === null || b === "") return false;
  return !/^[fF][aA][lL][sSſ][eE]$/u.test(text(b));
}

/** Why ParseDeadline refuses a value: the Go host's errors, word for word. */
export const DeadlineError = Object.freeze({
  syntax: "want an RFC 3339 time such as 2006-01-02T15:04:05.999999999Z or 2006-01-02T15:04:05+01:00",
  fraction: "more than 9 fractional digits",
  month: "month out of range",
  day: "day out of range",
  hour: "hour out of range",
  minute: "minute out of range",
  second: "second out of range",
  offset: "time zone offset out of range",
});

// atoi reads a string of ASCII digits, or returns -1.
function atoi(s) {
  return /^[0-9]+$/.test(s) ? Number(s) : -1;
}

function daysIn(month, year) {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

const NS_PER_SEC = 1_000_000_000n;

/**
 * parseDeadline is bus.ParseDeadline for a byte string: an RFC 3339
 * date-time, YYYY-MM-DD "T" hh:mm:ss [.fraction] ("Z" | ("+"|"-") hh:mm),
 * with "T" and "Z" in either case and 1 to 9 fractional digits. It returns
 * the instant in nanoseconds since the epoch (a BigInt), or throws an Error
 * whose message is one of DeadlineError, checked in the Go host's order.
 */
export function parseDeadline(s) {
  const fail = (why) => {
    throw new Error(why);
  };
  if (s.length < 20 || s[4] !== "-" || s[7] !== "-" || (s[10] !== "T" && s[10] !== "t") || s[13] !== ":" || s[16] !== ":") {
    fail(DeadlineError.syntax);
  }
  const [year, month, day, hour, minute, sec] = [s.slice(0, 4), s.slice(5, 7), s.slice(8, 10), s.slice(11, 13), s.slice(14, 16), s.slice(17, 19)].map(atoi);
  if ([year, month, day, hour, minute, sec].includes(-1)) fail(DeadlineError.syntax);
  let rest = s.slice(19);
  let nsec = 0n;
  if (rest[0] === ".") {
    let n = 1;
    while (n < rest.length && rest[n] >= "0" && rest[n] <= "9") n++;
    const digits = n - 1;
    if (digits === 0) fail(DeadlineError.syntax);
    if (digits > 9) fail(DeadlineError.fraction);
    nsec = BigInt(rest.slice(1, n).padEnd(9, "0"));
    rest = rest.slice(n);
  }
  let offset = 0; // seconds east of UTC
  if (rest !== "Z" && rest !== "z") {
    if (!(rest.length === 6 && (rest[0] === "+" || rest[0] === "-") && rest[3] === ":")) fail(DeadlineError.syntax);
    const oh = atoi(rest.slice(1, 3)), om = atoi(rest.slice(4, 6));
    if (oh < 0 || om < 0) fail(DeadlineError.syntax);
    if (oh > 23 || om > 59) fail(DeadlineError.offset);
    offset = (rest[0] === "-" ? -1 : 1) * (oh * 60 + om) * 60;
  }
  if (month < 1 || month > 12) fail(DeadlineError.month);
  if (day < 1 || day > daysIn(month, year)) fail(DeadlineError.day);
  if (hour > 23) fail(DeadlineError.hour);
  if (minute > 59) fail(DeadlineError.minute);
  if (sec > 59) fail(DeadlineError.second);
  // Date.UTC maps years 0-99 to 1900-1999; setUTCFullYear does not.
  const d = new Date(Date.UTC(2000, month - 1, day, hour, minute, sec));
  d.setUTCFullYear(year);
  return (BigInt(d.getTime() / 1000) - BigInt(offset)) * NS_PER_SEC + nsec;
}

/**
 * formatDeadline is bus.FormatDeadline: an instant in nanoseconds since the
 * epoch (a BigInt) as RFC 3339 in UTC with the fraction Go's RFC3339Nano
 * writes (trailing zeros dropped).
 */
export function formatDeadline(ns) {
  let sec = ns / NS_PER_SEC;
  let frac = ns % NS_PER_SEC;
  if (frac < 0n) {
    sec -= 1n;
    frac += NS_PER_SEC;
  }
  const d = new Date(Number(sec) * 1000);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  const y = d.getUTCFullYear();
  const year = y < 0 ? "-" + pad(-y, 4) : pad(y, 4);
  const f = frac === 0n ? "" : "." + String(frac).padStart(9, "0").replace(/0+$/, "");
  return `${year}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}T${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}${f}Z`;
}

/** nowNs is the current time in nanoseconds since the epoch (a BigInt). */
export function nowNs() {
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n;
}

/**
 * parseToolRequest is bus.ParseToolRequest. get(name) returns the first
 * value of a header as a byte string, "" when it is absent. A value that is
 * empty counts as absent. The checks, in this order, and the first failure
 * is the error (the Go host's text):
 *
 *   - Toolbus-Turn and Toolbus-Call, when present, must satisfy validID:
 *     `bad Toolbus-Turn header "<v>"`;
 *   - Toolbus-Agent, when present, must pass checkAgent:
 *     `bad Toolbus-Agent header "<v>": <reason>`;
 *   - Toolbus-Deadline, when present, must parse with parseDeadline:
 *     `bad Toolbus-Deadline header "<v>": <reason>`.
 *
 * It returns {req, error}: req holds every value as sent (byte strings;
 * deadline a BigInt, or null when absent or bad), error is "" or the text.
 */
export function parseToolRequest(get) {
  const req = {
    turn: get(Header.turn),
    call: get(Header.call),
    agent: get(Header.agent),
    task: get(Header.task),
    traceparent: get(Header.traceparent),
    truncated: truncatedHeader(get(Header.truncated)),
    deadline: null,
  };
  const bad = (name, value, why) => `bad ${name} header ${goQuote(value)}` + (why ? `: ${why}` : "");
  let error = "";
  let why;
  if (req.turn !== "" && !validID(req.turn)) error = bad(Header.turn, req.turn);
  else if (req.call !== "" && !validID(req.call)) error = bad(Header.call, req.call);
  else if (req.agent !== "" && (why = checkAgent(req.agent))) error = bad(Header.agent, req.agent, why);
  const d = get(Header.deadline);
  if (d !== "") {
    try {
      req.deadline = parseDeadline(d);
    } catch (err) {
      if (!error) error = bad(Header.deadline, d, err.message);
    }
  }
  return { req, error };
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
