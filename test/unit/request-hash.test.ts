import { describe, expect, it } from "vitest";
import { findUnstorable, isStorableText } from "../../src/contracts/text";
import { canonicalJson, jobRequestHash, requestHash } from "../../src/domain/request-hash";

describe("request hashes", () => {
  it("ignore object key order at every depth, and nothing else", async () => {
    expect(canonicalJson({ b: 1, a: { d: [2, { f: 1, e: 0 }], c: null } })).toBe(
      '{"a":{"c":null,"d":[2,{"e":0,"f":1}]},"b":1}',
    );
    expect(await requestHash({ a: 1, b: 2 })).toBe(await requestHash({ b: 2, a: 1 }));
    expect(await requestHash([1, 2])).not.toBe(await requestHash([2, 1]));
    expect(await requestHash({ a: "1" })).not.toBe(await requestHash({ a: 1 }));
    expect(await requestHash({ a: 1 })).toMatch(/^[0-9a-f]{64}$/);
  });

  it("a job's hash fills defaults and leaves the idempotency key out", async () => {
    const input = { messages: [{ role: "user" as const, content: "hi" }] };
    const bare = await jobRequestHash({ input });
    expect(await jobRequestHash({ input, tools: [], metadata: {}, idempotency_key: "k1" })).toBe(bare);
    expect(await jobRequestHash({ input, idempotency_key: "k2" })).toBe(bare);
    expect(await jobRequestHash({ input, model: "m" })).not.toBe(bare);
    expect(await jobRequestHash({ input, conversation_id: "c" })).not.toBe(bare);
  });

  it("covers `agent` as sent, and leaves a body without one hashing as before agents existed", async () => {
    const input = { messages: [{ role: "user" as const, content: "hi" }] };
    // Computed before `agent` existed: keys stored by then still match their replays.
    expect(await jobRequestHash({ input })).toBe("f1d0658d2d55fb2b8bf4505e71214604aa8df7810af51f67e491c2f929290739");
    const named = await jobRequestHash({ input, agent: "triage" });
    expect(named).not.toBe(await jobRequestHash({ input }));
    expect(await jobRequestHash({ input, agent: "triage@3" })).not.toBe(named);
    expect(await jobRequestHash({ input, agent: "other" })).not.toBe(named);
  });
});

describe("storable text", () => {
  it("refuses NUL and unpaired surrogates, accepts pairs and other control characters", () => {
    for (const bad of ["\u0000", "a\u0000", "\ud800", "x\udfff", "\udc00\ud800", "🌍".slice(0, 1)]) {
      expect(isStorableText(bad), JSON.stringify(bad)).toBe(false);
    }
    for (const good of ["", "plain", "🌍", "tab\tnew\nline\u0001", "\ud83c\udf0d"]) {
      expect(isStorableText(good), JSON.stringify(good)).toBe(true);
    }
  });

  it("finds the first unstorable string in JSON, keys reported at their object's path", () => {
    expect(findUnstorable({ a: [1, { b: "ok" }], c: "\u0000" })).toEqual({ path: ["c"], isKey: false });
    expect(findUnstorable({ a: { "k\u0000": 1 } })).toEqual({ path: ["a"], isKey: true });
    expect(findUnstorable({ a: ["x", "\ud800"] })).toEqual({ path: ["a", 1], isKey: false });
    expect(findUnstorable({ a: ["x", 1, null, true] })).toBeNull();
  });
});
