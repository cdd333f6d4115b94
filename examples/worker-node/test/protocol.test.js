// Unit tests of the wire details: node --test (npm test).
import { test } from "node:test";
import assert from "node:assert/strict";

import { ArgumentError, compileArgs, goDuration, parseDeadline, truncatedHeader, validAgent, validToken } from "../protocol.js";

test("parseDeadline takes RFC 3339 with an optional fraction", () => {
  assert.ok(Math.abs(parseDeadline("2026-11-30T18:00:00.1234567891Z") - (Date.UTC(2026, 10, 30, 18) + 123.4567891)) < 1e-3);
  assert.equal(parseDeadline("2026-11-30T18:00:00Z"), Date.UTC(2026, 10, 30, 18));
  assert.equal(parseDeadline("2026-11-30T18:00:00.5Z"), Date.UTC(2026, 10, 30, 18) + 500);
  assert.ok(Math.abs(parseDeadline("2026-11-30T18:00:00.123456789Z") - (Date.UTC(2026, 10, 30, 18) + 123.456789)) < 1e-3);
  assert.equal(parseDeadline("2026-11-30T19:30:00+01:30"), Date.UTC(2026, 10, 30, 18));
  assert.equal(parseDeadline("2026-11-30T16:00:00-02:00"), Date.UTC(2026, 10, 30, 18));
  for (const bad of ["", "yesterday", "2026-11-30", "2026-11-30 18:00:00Z", "2026-11-30T18:00:00", "2026-11-30T18:00:00.Z",
    "2026-02-30T18:00:00Z", "2026-13-01T00:00:00Z", "2026-11-30T24:00:00Z", "2026-11-30T18:00:00+25:00"]) {
    assert.throws(() => parseDeadline(bad), Error, bad);
  }
});

test("goDuration writes Go's time.Duration syntax", () => {
  const cases = [[0, "0s"], [1.5, "1.5ms"], [500, "500ms"], [1000, "1s"], [1500, "1.5s"], [2000, "2s"], [60_000, "1m0s"],
    [90_000, "1m30s"], [611_000, "10m11s"], [3_600_000, "1h0m0s"], [3_723_500, "1h2m3.5s"]];
  for (const [ms, want] of cases) assert.equal(goDuration(ms), want, `${ms} ms`);
});

test("tokens, agents and the truncation header", () => {
  for (const ok of ["t1", "call_Ab12", "02pX1tgStlxB0z1uZJ1xsy", "ü-1"]) assert.ok(validToken(ok), ok);
  for (const bad of ["", "a.b", "a*", ">", "a b", "a\tb", "a\u0000", "a\u007f"]) assert.ok(!validToken(bad), JSON.stringify(bad));
  assert.ok(validAgent("alice_1-x"));
  for (const bad of ["", "../a1", "a b", "x".repeat(129)]) assert.ok(!validAgent(bad), bad);
  for (const v of ["true", "1", "yes", "TRUE"]) assert.ok(truncatedHeader(v), v);
  for (const v of [undefined, "", "false"]) assert.ok(!truncatedHeader(v), String(v));
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
