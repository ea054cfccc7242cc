import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { hostBatchMac, ingestKeyBytes } from "../../sandbox-host/outbox/batch-mac";
import {
  batchMac,
  deriveIngestKey,
  SIGNATURE_MAX_SKEW_MS,
  signRequest,
  verifyBatchMac,
  verifyRequest,
} from "../../src/domain/signing";

const secret = "s3cret";
const body = JSON.stringify({ job_id: "j", events: [] });

describe("internal request signing", () => {
  it("verifies what it signed", async () => {
    const h = await signRequest(secret, "POST", "/internal/events", body);
    expect(await verifyRequest(secret, "POST", "/internal/events", body, h)).toEqual({ ok: true });
  });

  it("rejects a tampered body, path, method or secret", async () => {
    const h = await signRequest(secret, "POST", "/internal/events", body);
    expect((await verifyRequest(secret, "POST", "/internal/events", `${body} `, h)).ok).toBe(false);
    expect((await verifyRequest(secret, "POST", "/internal/other", body, h)).ok).toBe(false);
    expect((await verifyRequest(secret, "PUT", "/internal/events", body, h)).ok).toBe(false);
    expect((await verifyRequest("other", "POST", "/internal/events", body, h)).ok).toBe(false);
  });

  it("rejects a stale or future timestamp and a swapped nonce", async () => {
    const now = Date.now();
    const old = await signRequest(secret, "POST", "/p", body, now - SIGNATURE_MAX_SKEW_MS - 1);
    expect(await verifyRequest(secret, "POST", "/p", body, old, now)).toEqual({ ok: false, reason: "stale" });
    const future = await signRequest(secret, "POST", "/p", body, now + SIGNATURE_MAX_SKEW_MS + 1);
    expect(await verifyRequest(secret, "POST", "/p", body, future, now)).toEqual({ ok: false, reason: "stale" });
    const h = await signRequest(secret, "POST", "/p", body, now);
    expect((await verifyRequest(secret, "POST", "/p", body, { ...h, nonce: crypto.randomUUID() }, now)).ok).toBe(false);
  });

  it("rejects missing and malformed headers", async () => {
    expect(await verifyRequest(secret, "POST", "/p", body, {})).toEqual({ ok: false, reason: "missing" });
    const h = await signRequest(secret, "POST", "/p", body);
    expect(await verifyRequest(secret, "POST", "/p", body, { ...h, signature: "zz" })).toEqual({
      ok: false,
      reason: "bad_signature",
    });
  });
});

describe("secret rotation", () => {
  const current = "current-secret-0123456789";
  const previous = "previous-secret-0123456789";

  it("accepts a request signed with the current or the previous secret, and nothing else", async () => {
    for (const signer of [current, previous]) {
      const h = await signRequest(signer, "POST", "/p", body);
      expect(await verifyRequest([current, previous], "POST", "/p", body, h)).toEqual({ ok: true });
    }
    const h = await signRequest("a-third-secret-0123456789", "POST", "/p", body);
    expect(await verifyRequest([current, previous], "POST", "/p", body, h)).toEqual({
      ok: false,
      reason: "bad_signature",
    });
    // Once the rotation is over, the previous secret no longer works.
    const old = await signRequest(previous, "POST", "/p", body);
    expect((await verifyRequest([current], "POST", "/p", body, old)).ok).toBe(false);
  });

  it("signs with a nonce chosen by the caller (batch macs cover it)", async () => {
    const nonce = crypto.randomUUID();
    const h = await signRequest(current, "POST", "/p", body, Date.now(), nonce);
    expect(h.nonce).toBe(nonce);
    expect((await verifyRequest(current, "POST", "/p", body, h)).ok).toBe(true);
  });
});

describe("batch macs under the execution's ingest key", () => {
  const token = "6f1c1c3e-7a4b-4c55-9d1e-2b2f4f0e9a11";
  const exec = "0b6e3e0e-1f0a-4d6b-8c9e-5a4d3c2b1a00";
  const job = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d";
  const events = JSON.stringify([{ seq: 1, type: "model.delta", payload: { text: "hi" } }]);

  it("verifies under the same token and execution; any other token, execution, nonce, job or byte fails", async () => {
    const key = await deriveIngestKey(token, exec);
    const mac = await batchMac(key, "n1", job, events);
    expect(mac).toMatch(/^[0-9a-f]{64}$/);
    expect(await verifyBatchMac(await deriveIngestKey(token.toUpperCase(), exec), "n1", job, events, mac)).toBe(true);
    expect(await verifyBatchMac(await deriveIngestKey(crypto.randomUUID(), exec), "n1", job, events, mac)).toBe(false);
    expect(await verifyBatchMac(await deriveIngestKey(token, crypto.randomUUID()), "n1", job, events, mac)).toBe(false);
    expect(await verifyBatchMac(key, "n2", job, events, mac)).toBe(false);
    expect(await verifyBatchMac(key, "n1", crypto.randomUUID(), events, mac)).toBe(false);
    expect(await verifyBatchMac(key, "n1", job, events.replace("hi", "ho"), mac)).toBe(false);
    expect(await verifyBatchMac(key, "n1", job, events, "zz")).toBe(false);
  });

  it("the host's node:crypto mac is the WebCrypto mac the gateway verifies, for any events text", {
    timeout: 30_000,
  }, async () => {
    const key = await deriveIngestKey(token, exec);
    const raw = await ingestKeyBytes(token, exec);
    await fc.assert(
      fc.asyncProperty(fc.string({ unit: "grapheme" }), fc.uuid(), async (text, nonce) => {
        const json = JSON.stringify([{ seq: 1, type: "model.delta", payload: { text } }]);
        const mac = hostBatchMac(raw, nonce, job, json);
        expect(mac).toBe(await batchMac(key, nonce, job, json));
        expect(await verifyBatchMac(key, nonce, job, json, mac)).toBe(true);
      }),
      { numRuns: 100 },
    );
  });

  /**
   * The host macs `JSON.stringify(events)` and puts that text in the body; the gateway macs
   * `JSON.stringify` of what `JSON.parse` gave back. That only works if V8's parse → stringify of
   * stringify output is byte-identical, for any payload a host could put in an event.
   */
  it("JSON.parse → JSON.stringify of JSON.stringify output gives back the same bytes", () => {
    const text = fc.string({ unit: "binary" }); // any code unit sequence, lone surrogates included
    const key = fc.oneof(
      text,
      fc.integer({ min: 0, max: 2 ** 32 }).map(String),
      fc.constantFrom("__proto__", "-1", "01"),
    );
    const leaf = fc.oneof(
      text,
      fc.double(),
      fc.integer(),
      fc.constantFrom(0, -0, 1e21, 5e-324, Number.MAX_SAFE_INTEGER, 0.1 + 0.2),
      fc.boolean(),
      fc.constant(null),
    );
    const value = fc.letrec((tie) => ({
      node: fc.oneof({ depthSize: "small" }, leaf, tie("array"), tie("object")),
      array: fc.array(tie("node"), { maxLength: 5 }),
      object: fc.dictionary(key, tie("node"), { maxKeys: 5 }),
    })).node;
    fc.assert(
      fc.property(value, (v) => {
        const once = JSON.stringify(v);
        expect(JSON.stringify(JSON.parse(once))).toBe(once);
      }),
      { numRuns: 2000 },
    );
    // 2,000 generated payloads take ~1 s on a quiet core; 30 s so a loaded machine does not time it out.
  }, 30_000);
});
