import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  BadCommandError,
  commandFromJson,
  commandFromPath,
  commandsFromJson,
  refusalReason,
  ScriptTranslator,
} from "./commands";
import { encodeReply } from "./reply";

describe("upstash REST request parsing", () => {
  it("lower-cases the name and sends numbers and booleans as text", () => {
    expect(commandFromJson(["SET", "k", "v", "EX", 100, true])).toEqual({
      name: "set",
      args: ["k", "v", "EX", "100", "true"],
    });
  });

  it("rejects non-arrays, empty commands and object arguments", () => {
    expect(() => commandFromJson({ cmd: "PING" })).toThrow(BadCommandError);
    expect(() => commandFromJson([])).toThrow(/non-empty JSON array/);
    expect(() => commandFromJson(["SET", "k", { a: 1 }])).toThrow(/argument 2 is object/);
    expect(() => commandsFromJson([["PING"], "PING"])).toThrow(/command 1/);
  });

  it("reads the path form: decoded segments, then the body, then query parameters", () => {
    const body = Buffer.from([0xff, 0x00]);
    const cmd = commandFromPath("/SET/a%2Fb", new URLSearchParams("EX=100&_token=secret&NX"), body);
    expect(cmd).toEqual({ name: "set", args: ["a/b", body, "EX", "100", "NX"] });
    expect(() => commandFromPath("/get/%E0%A4%A", new URLSearchParams(), undefined)).toThrow(/percent-encoding/);
  });

  it("refuses commands that would block or re-state the shared connection", () => {
    expect(refusalReason({ name: "blpop", args: ["q", "0"] })).toMatch(/BLPOP.*timeout/);
    expect(refusalReason({ name: "brpop", args: ["q", "61"] })).toMatch(/BRPOP.*timeout/);
    expect(refusalReason({ name: "blpop", args: ["q", "55"] })).toBeUndefined();
    expect(refusalReason({ name: "blmove", args: ["a", "b", "LEFT", "LEFT", "1"] })).toMatch(/BLMOVE.*blocks/);
    expect(refusalReason({ name: "subscribe", args: ["c"] })).toMatch(/SUBSCRIBE/);
    expect(refusalReason({ name: "multi", args: [] })).toMatch(/multi-exec/);
    expect(refusalReason({ name: "client", args: ["REPLY", "OFF"] })).toMatch(/CLIENT REPLY/);
    expect(refusalReason({ name: "xread", args: ["BLOCK", "0", "STREAMS", "s", "$"] })).toMatch(/BLOCK/);
    expect(refusalReason({ name: "xread", args: ["COUNT", "1", "STREAMS", "s", "0"] })).toBeUndefined();
    expect(refusalReason({ name: "get", args: ["k"] })).toBeUndefined();
  });
});

describe("upstash reply encoding", () => {
  const b = (s: string) => Buffer.from(s);
  it("base64-encodes every string at any depth except a top-level OK", () => {
    expect(encodeReply(b("OK"), "base64")).toBe("OK");
    expect(encodeReply([b("OK"), 1, null, [b("x"), [b("OK")]]], "base64")).toEqual([
      "T0s=",
      1,
      null,
      ["eA==", ["T0s="]],
    ]);
    expect(encodeReply(b("PONG"), "base64")).toBe("UE9ORw==");
  });
  it("sends UTF-8 text without the header", () => {
    expect(encodeReply([b("✓"), new Error("ERR nested")], "utf8")).toEqual(["✓", "ERR nested"]);
  });
});

describe("Upstash-only Lua flags", () => {
  const sha1 = (t: string) => createHash("sha1").update(t, "utf8").digest("hex");
  const flagged = "#!lua flags=allow-key-locking\nreturn 1";

  it("drops allow-key-locking from EVAL and SCRIPT LOAD, keeps other flags, leaves plain scripts alone", () => {
    const t = new ScriptTranslator(sha1);
    expect(t.translate({ name: "eval", args: [flagged, "0"] }).args[0]).toBe("#!lua\nreturn 1");
    expect(
      t.translate({ name: "eval", args: ["#!lua flags=no-writes,allow-key-locking\nreturn 1", "0"] }).args[0],
    ).toBe("#!lua flags=no-writes\nreturn 1");
    expect(t.translate({ name: "script", args: ["LOAD", flagged] }).args[1]).toBe("#!lua\nreturn 1");
    const plain = { name: "eval", args: ["return 1", "0"] };
    expect(t.translate(plain)).toBe(plain);
  });

  it("translates EVALSHA of the flagged script to the digest Redis knows, once it has seen the script", () => {
    const t = new ScriptTranslator(sha1);
    const call = { name: "evalsha", args: [sha1(flagged), "1", "k"] };
    expect(t.translate(call)).toBe(call); // unknown yet: Redis says NOSCRIPT, the client EVALs
    t.translate({ name: "eval", args: [flagged, "1", "k"] });
    expect(t.translate(call).args).toEqual([sha1("#!lua\nreturn 1"), "1", "k"]);
  });
});
