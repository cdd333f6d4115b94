// Unit tests of the wire details: node --test (npm test).
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  ArgumentError, DeadlineError, MAX_ID_LEN, bytesOf, checkAgent, compileArgs, formatDeadline, goDuration, goQuote,
  parseDeadline, parseToolRequest, text, truncatedHeader, validID, validToken,
} from "../protocol.js";
import { rawHeaders } from "../host.js";

// The cases of bus/request_test.go and bus/agent_test.go: the worker reads
// the headers as the Go host does.

const ns = (ms) => BigInt(ms) * 1_000_000n;

test("parseDeadline is bus.ParseDeadline", () => {
  const at = (nsec) => ns(Date.UTC(2026, 10, 29, 19, 9, 29)) + BigInt(nsec);
  const utc = (...a) => ns(Date.UTC(...a));
  const good = [
    ["2026-11-29T19:09:29Z", at(0)],
    ["2026-11-29T19:09:29.3Z", at(300000000)],
    ["2026-11-29T19:09:29.39Z", at(390000000)],
    ["2026-11-29T19:09:29.391Z", at(391000000)],
    ["2026-11-29T19:09:29.391614Z", at(391614000)],
    ["2026-11-29T19:09:29.391614127Z", at(391614127)],
    ["2026-11-29T19:09:29.000000001Z", at(1)],
    ["2026-11-29T20:09:29+01:00", at(0)],
    ["2026-11-29T20:39:29.5+01:30", at(500000000)],
    ["2026-11-29T14:09:29-05:00", at(0)],
    ["2026-11-29T19:09:29+00:00", at(0)],
    ["2026-11-29T19:09:29-00:00", at(0)],
    ["2026-11-29t19:09:29z", at(0)],
    ["2026-11-29t19:09:29.391614127z", at(391614127)],
    ["2026-11-29T19:09:29z", at(0)],
    ["2026-11-29t19:09:29Z", at(0)],
    ["2026-11-30T04:09:29.25+09:00", at(250000000)],
    ["2026-11-29T00:09:29+00:00", utc(2026, 10, 29, 0, 9, 29)],
    ["2026-11-30T00:00:00+01:00", utc(2026, 10, 29, 23, 0, 0)],
    ["2024-02-29T12:00:00Z", utc(2024, 1, 29, 12, 0, 0)],
    ["2000-02-29T12:00:00Z", utc(2000, 1, 29, 12, 0, 0)],
    ["0001-01-01T00:00:00Z", -62135596800n * 1_000_000_000n],
  ];
  for (const [s, want] of good) assert.equal(parseDeadline(s), want, s);
  const bad = [
    ["", DeadlineError.syntax],
    ["tomorrow", DeadlineError.syntax],
    ["2026-11-29", DeadlineError.syntax],
    ["2026-11-29T19:09:29", DeadlineError.syntax],
    ["2026-11-29 19:09:29Z", DeadlineError.syntax],
    ["2026-11-29T19:09:29.Z", DeadlineError.syntax],
    ["2026-11-29T19:09:29,5Z", DeadlineError.syntax],
    ["2026-11-29T19:09:29.1234567891Z", DeadlineError.fraction],
    ["2026-11-29T19:09:29+0100", DeadlineError.syntax],
    ["2026-11-29T19:09:29+01", DeadlineError.syntax],
    ["2026-11-29T19:09:29 Z", DeadlineError.syntax],
    ["2026-11-29T19:09:29ZZ", DeadlineError.syntax],
    ["2026-11-29T19:09:29Z ", DeadlineError.syntax],
    ["+2026-11-29T19:09:29Z", DeadlineError.syntax],
    ["2026-1a-29T19:09:29Z", DeadlineError.syntax],
    ["2026-11-29T19:09:29+0a:00", DeadlineError.syntax],
    ["2026-13-29T19:09:29Z", DeadlineError.month],
    ["2026-00-29T19:09:29Z", DeadlineError.month],
    ["2026-02-29T19:09:29Z", DeadlineError.day],
    ["1900-02-29T19:09:29Z", DeadlineError.day],
    ["2026-04-31T19:09:29Z", DeadlineError.day],
    ["2026-11-00T19:09:29Z", DeadlineError.day],
    ["2026-11-29T24:00:00Z", DeadlineError.hour],
    ["2026-11-29T19:60:29Z", DeadlineError.minute],
    ["2026-11-29T19:09:60Z", DeadlineError.second],
    ["2026-11-29T19:09:29+24:00", DeadlineError.offset],
    ["2026-11-29T19:09:29+01:60", DeadlineError.offset],
    // The fraction is checked before the zone, and the zone before the ranges.
    ["2026-13-29T19:09:29.1234567891Z", DeadlineError.fraction],
    ["2026-13-29T19:09:29+24:00", DeadlineError.offset],
    ["2026-13-29T19:09:29+0100", DeadlineError.syntax],
  ];
  for (const [s, why] of bad) assert.throws(() => parseDeadline(s), { message: why }, s);
});

test("formatDeadline is bus.FormatDeadline", () => {
  for (const [s, want] of [
    ["2026-11-29T19:09:29Z", "2026-11-29T19:09:29Z"],
    ["2026-11-29t20:09:29.5+01:00", "2026-11-29T19:09:29.5Z"],
    ["2026-11-29T19:09:29.120000000Z", "2026-11-29T19:09:29.12Z"],
    ["2026-11-29T19:09:29.000000001z", "2026-11-29T19:09:29.000000001Z"],
    ["0000-01-01T00:30:00.25+01:00", "-0001-12-31T23:30:00.25Z"],
    ["0050-06-01T00:00:00Z", "0050-06-01T00:00:00Z"],
    ["9999-12-31T23:59:59-01:00", "10000-01-01T00:59:59Z"],
  ]) {
    assert.equal(formatDeadline(parseDeadline(s)), want, s);
  }
});

test("tokens and ids are bus.ValidToken and bus.ValidID", () => {
  for (const ok of ["t1", "call_Ab12", "02pX1tgStlxB0z1uZJ1xsy", "ü-1", "a\ufeffb", "\ufffd"]) assert.ok(validToken(bytesOf(ok)), ok);
  for (const bad of ["", "a.b", "a*", ">", "a b", "a\tb", "a\u0000", "a\u007f", "a\u0085", "a\u00a0", "a\u2028", "a\u3000"]) {
    assert.ok(!validToken(bytesOf(bad)), JSON.stringify(bad));
  }
  for (const bad of ["a\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82"]) assert.ok(!validToken(bad), JSON.stringify(bad)); // not UTF-8
  assert.ok(validID("x".repeat(MAX_ID_LEN)));
  assert.ok(!validID("x".repeat(MAX_ID_LEN + 1)));
  assert.ok(validID(bytesOf("ü".repeat(MAX_ID_LEN / 2))));
  assert.ok(!validID(bytesOf("ü".repeat(MAX_ID_LEN / 2) + "x")), "length in bytes");
});

test("checkAgent is bus.CheckAgent", () => {
  for (const ok of ["alice", "alice_1-x", "A", "x".repeat(64)]) assert.equal(checkAgent(bytesOf(ok)), "", ok);
  const only = "; only ASCII letters, digits, '_' and '-' are allowed";
  for (const [id, want] of [
    ["", "agent id is empty"],
    ["x".repeat(65), "agent id is 65 bytes long; at most 64 are allowed"],
    ["ü".repeat(40), "agent id is 80 bytes long; at most 64 are allowed"],
    ["../a1", "agent id has '.' at position 1" + only],
    ["a.b", "agent id has '.' at position 2" + only],
    ["a b", "agent id has ' ' at position 2" + only],
    ["ab'", "agent id has '\\'' at position 3" + only],
    ["a\"", "agent id has '\"' at position 2" + only],
    ["a\tb", "agent id has '\\t' at position 2" + only],
    ["aüb", "agent id has 'ü' at position 2" + only],
    ["a\u00a0", "agent id has '\\u00a0' at position 2" + only],
    ["a\u0001", "agent id has '\\x01' at position 2" + only],
    ["😀", "agent id has '😀' at position 1" + only],
  ]) {
    assert.equal(checkAgent(bytesOf(id)), want, JSON.stringify(id));
  }
  assert.equal(checkAgent("ab\xff"), "agent id has byte 0xff at position 3" + only);
});

test("goQuote is strconv.Quote", () => {
  for (const [s, want] of [
    [bytesOf("a.b"), '"a.b"'],
    [bytesOf("tür 1"), '"tür 1"'],
    [bytesOf('q"\\'), '"q\\"\\\\"'],
    [bytesOf("\x07\b\f\n\r\t\v"), '"\\a\\b\\f\\n\\r\\t\\v"'],
    [bytesOf("a\x7fb\u00a0c\ufeffd\x01e"), '"a\\x7fb\\u00a0c\\ufeffd\\x01e"'],
    [bytesOf("\u2028\u0301😀\u00ad"), '"\\u2028\u0301😀\\u00ad"'],
    ["e\xff\xe2\x82", '"e\\xff\\xe2\\x82"'],
  ]) {
    assert.equal(goQuote(s), want, JSON.stringify(s));
  }
  assert.equal(text("c\xff\xe2\x82"), "c\ufffd\ufffd\ufffd", "each bad byte is one U+FFFD, as Go's encoding/json writes it");
});

test("truncatedHeader fails closed", () => {
  for (const v of ["true", "1", "yes", "TRUE", "0", "no", "false ", "fals"]) assert.ok(truncatedHeader(bytesOf(v)), v);
  for (const v of [undefined, "", "false", "FALSE", "False", "fAlSe", "falſe"]) assert.ok(!truncatedHeader(v && bytesOf(v)), String(v));
});

test("parseToolRequest is bus.ParseToolRequest", () => {
  const long = "x".repeat(MAX_ID_LEN);
  const only = "; only ASCII letters, digits, '_' and '-' are allowed";
  const get = (h) => (name) => (h[name] === undefined ? "" : bytesOf(h[name]));
  const cases = [
    [{}, ""],
    [{ "Toolbus-Call": "c9", "Toolbus-Agent": "alice" }, ""],
    [{ "Toolbus-Turn": "", "Toolbus-Call": "", "Toolbus-Agent": "", "Toolbus-Deadline": "", "Toolbus-Truncated": "" }, ""],
    [{ "Toolbus-Turn": long, "Toolbus-Call": long }, ""],
    [{ "Toolbus-Task": "any thing.", traceparent: "junk" }, ""],
    [{ "Toolbus-Turn": "a.b" }, 'bad Toolbus-Turn header "a.b"'],
    [{ "Toolbus-Turn": long + "x" }, `bad Toolbus-Turn header "${long}x"`],
    [{ "Toolbus-Call": "c 1" }, 'bad Toolbus-Call header "c 1"'],
    [{ "Toolbus-Call": long + "x" }, `bad Toolbus-Call header "${long}x"`],
    [{ "Toolbus-Agent": "../a1" }, `bad Toolbus-Agent header "../a1": agent id has '.' at position 1${only}`],
    [{ "Toolbus-Deadline": "tomorrow", "Toolbus-Call": "c1" }, `bad Toolbus-Deadline header "tomorrow": ${DeadlineError.syntax}`],
    [{ "Toolbus-Turn": "t*", "Toolbus-Call": "c>", "Toolbus-Agent": "a.b", "Toolbus-Deadline": "x" }, 'bad Toolbus-Turn header "t*"'],
    [{ "Toolbus-Call": "c>", "Toolbus-Agent": "a.b", "Toolbus-Deadline": "x" }, 'bad Toolbus-Call header "c>"'],
    [{ "Toolbus-Agent": "a.b", "Toolbus-Deadline": "x", "Toolbus-Truncated": "true" }, `bad Toolbus-Agent header "a.b": agent id has '.' at position 2${only}`],
  ];
  for (const [h, want] of cases) assert.equal(parseToolRequest(get(h)).error, want, JSON.stringify(h));

  let { req, error } = parseToolRequest(get({ "Toolbus-Turn": "t.1", "Toolbus-Deadline": "2026-11-29T19:09:29Z", "Toolbus-Truncated": "1" }));
  assert.equal(error, 'bad Toolbus-Turn header "t.1"');
  assert.equal(req.deadline, ns(Date.UTC(2026, 10, 29, 19, 9, 29)), "the deadline is kept when another header is bad");
  assert.equal(req.truncated, true);
  ({ req, error } = parseToolRequest(get({ "Toolbus-Call": "c\u00a0" })));
  assert.equal(error, 'bad Toolbus-Call header "c\\u00a0"');
  assert.equal(text(req.call), "c\u00a0");
});

test("rawHeaders reads the header block as nats.go does", () => {
  const block = "NATS/1.0\r\nToolbus-Call: c1\x0b\r\nToolbus-Turn:\t t\xc2\xa0\r\nToolbus-Call: c2\r\n:x\r\ntoolbus-agent: a\r\n\r\n";
  const data = Buffer.concat([Buffer.from(block, "latin1"), Buffer.from('{"id":"c1"}')]);
  const get = rawHeaders({ msg: { _msg: { hdr: Buffer.byteLength(block, "latin1") }, _rdata: new Uint8Array(data) } });
  assert.equal(get("Toolbus-Call"), "c1\x0b", "the first value, not trimmed");
  assert.equal(get("Toolbus-Turn"), "t\xc2\xa0", "spaces and tabs after the colon skipped, the bytes kept");
  assert.equal(get("Toolbus-Agent"), "", "names are matched exactly");
  assert.equal(get("Toolbus-Deadline"), "");
  const none = rawHeaders({ msg: { _msg: { hdr: -1 }, _rdata: new Uint8Array(2) } });
  assert.equal(none("Toolbus-Call"), "");
  assert.equal(rawHeaders({ headers: undefined }), null);
});

test("goDuration writes Go's time.Duration syntax", () => {
  const cases = [[0, "0s"], [1.5, "1.5ms"], [500, "500ms"], [1000, "1s"], [1500, "1.5s"], [2000, "2s"], [60_000, "1m0s"],
    [90_000, "1m30s"], [611_000, "10m11s"], [3_600_000, "1h0m0s"], [3_723_500, "1h2m3.5s"]];
  for (const [ms, want] of cases) assert.equal(goDuration(ms), want, `${ms} ms`);
});

test("compileArgs: root object rule, empty body, Go-style leaves", () => {
  assert.throws(() => compileArgs({ type: "string" }), /root object schema/);
  const parse = compileArgs({
    type: "object",
    properties: { id: { type: "string" }, n: { type: "integer", minimum: 1 } },
    required: ["id"],
    additionalProperties: false,
  });
  assert.deepEqual(parse(`{"id":"c1"}`), { id: "c1" });
  const msg = (body) => {
    try {
      parse(body);
    } catch (err) {
      assert.ok(err instanceof ArgumentError);
      return err.message;
    }
    assert.fail(`${body} was accepted`);
  };
  assert.equal(msg(""), "arguments do not match the schema:\n- /: required property 'id' is missing");
  assert.equal(msg(`{"id":5,"x/y":1,"n":0}`),
    "arguments do not match the schema:\n- /id: value is integer but should be string\n- /n: must be >= 1\n- /x~1y: property is not allowed (not declared in the schema)");
  assert.match(msg(`{"id":`), /^arguments do not match the schema:\n- \/: not valid JSON: /);
  assert.equal(msg(`"c1"`), "arguments do not match the schema:\n- /: value is string but should be object");
});
