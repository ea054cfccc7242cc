import { describe, expect, it } from "vitest";
import { SIGNATURE_MAX_SKEW_MS, signRequest, verifyRequest } from "../../src/domain/signing";

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
