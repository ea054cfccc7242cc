/** POST /internal/events: HMAC-signed host ingest — forged, tampered, stale and replayed requests write nothing. */
import { describe, expect, it } from "vitest";
import { INTERNAL_HEADERS, type IngestBatch } from "../../src/contracts";
import { type SignedHeaders, signRequest } from "../../src/domain";
import { batch, gateway, newJob, offsets, testEnv } from "./helpers";

const URL_ = "http://gateway.test/internal/events";
const PATH = "/internal/events";

function headersOf(signed: SignedHeaders): Record<string, string> {
  return {
    "content-type": "application/json",
    [INTERNAL_HEADERS.timestamp]: signed.timestamp,
    [INTERNAL_HEADERS.nonce]: signed.nonce,
    [INTERNAL_HEADERS.signature]: signed.signature,
  };
}

async function send(body: string, headers: Record<string, string>): Promise<Response> {
  return gateway.fetch(URL_, { method: "POST", body, headers });
}

async function signedSend(b: IngestBatch, opts: { secret?: string; now?: number } = {}) {
  const body = JSON.stringify(b);
  const signed = await signRequest(opts.secret ?? testEnv.INTERNAL_SIGNING_SECRET, "POST", PATH, body, opts.now);
  return { body, headers: headersOf(signed), res: await send(body, headersOf(signed)) };
}

async function expectError(res: Response, status: number, code: string): Promise<void> {
  expect(res.status).toBe(status);
  expect(((await res.json()) as { error: { code: string } }).error.code).toBe(code);
}

describe("POST /internal/events", () => {
  it("accepts a validly signed batch, returns the ack, and the events are in the job's log", async () => {
    const { jobId, stub } = newJob();
    const { res } = await signedSend(batch(jobId, "exec-a", 1, [1, 2]));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ acked_seq: 2, accepted: 2, duplicates: 0, buffered: 0, deferred: 0 });
    expect((await offsets(stub)).map((e) => [e.offset, e.seq])).toEqual([
      [1, 1],
      [2, 2],
    ]);
  });

  it("answers a replay of the same signed request with 409 and writes nothing", async () => {
    const { jobId, stub } = newJob();
    const first = await signedSend(batch(jobId, "exec-a", 1, [1]));
    expect(first.res.status).toBe(200);
    await expectError(await send(first.body, first.headers), 409, "conflict");
    // Same nonce, new events: still refused, log unchanged.
    const second = JSON.stringify(batch(jobId, "exec-a", 1, [2]));
    const resigned = await signRequest(testEnv.INTERNAL_SIGNING_SECRET, "POST", PATH, second);
    const sameNonce = headersOf({ ...resigned, nonce: first.headers[INTERNAL_HEADERS.nonce] as string });
    await expectError(await send(second, sameNonce), 401, "unauthorized"); // the nonce is signed too
    expect((await offsets(stub)).map((e) => e.seq)).toEqual([1]);
  });

  it("refuses a request signed with another secret", async () => {
    const { jobId, stub } = newJob();
    const { res } = await signedSend(batch(jobId, "exec-a", 1, [1]), { secret: "not-the-gateway-secret-xyz" });
    await expectError(res, 401, "unauthorized");
    expect(await offsets(stub)).toEqual([]);
  });

  it("refuses a tampered body", async () => {
    const { jobId, stub } = newJob();
    const body = JSON.stringify(batch(jobId, "exec-a", 1, [1]));
    const signed = await signRequest(testEnv.INTERNAL_SIGNING_SECRET, "POST", PATH, body);
    const tampered = body.replace('"t1"', '"t1!"');
    expect(tampered).not.toBe(body);
    await expectError(await send(tampered, headersOf(signed)), 401, "unauthorized");
    expect(await offsets(stub)).toEqual([]);
  });

  it("refuses a stale timestamp even with a valid signature", async () => {
    const { jobId, stub } = newJob();
    const { res } = await signedSend(batch(jobId, "exec-a", 1, [1]), { now: Date.now() - 61_000 });
    await expectError(res, 401, "unauthorized");
    expect(await offsets(stub)).toEqual([]);
  });

  it("refuses missing signature headers and a garbage signature", async () => {
    const { jobId, stub } = newJob();
    const body = JSON.stringify(batch(jobId, "exec-a", 1, [1]));
    await expectError(await send(body, { "content-type": "application/json" }), 401, "unauthorized");
    const signed = await signRequest(testEnv.INTERNAL_SIGNING_SECRET, "POST", PATH, body);
    await expectError(await send(body, headersOf({ ...signed, signature: "zz" })), 401, "unauthorized");
    expect(await offsets(stub)).toEqual([]);
  });

  it("validates a signed body: malformed JSON 400, schema failure 400, mixed executions 400", async () => {
    const signedRaw = async (raw: string) =>
      send(raw, headersOf(await signRequest(testEnv.INTERNAL_SIGNING_SECRET, "POST", PATH, raw)));
    await expectError(await signedRaw("{nope"), 400, "invalid_json");
    await expectError(await signedRaw(JSON.stringify({ job_id: "j", events: [] })), 400, "invalid_request");
    const { jobId } = newJob();
    const mixed = batch(jobId, "exec-a", 1, [1, 2]);
    (mixed.events[1] as { execution_id: string }).execution_id = "exec-b";
    await expectError(await signedRaw(JSON.stringify(mixed)), 400, "invalid_request");
  });

  it("maps a stale epoch to 409", async () => {
    const { jobId, stub } = newJob();
    expect((await signedSend(batch(jobId, "exec-b", 2, [1]))).res.status).toBe(200);
    const { res } = await signedSend(batch(jobId, "exec-a", 1, [1]));
    expect(res.status).toBe(409);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/^stale_epoch: /);
    expect((await offsets(stub)).map((e) => e.execution_id)).toEqual(["exec-b"]);
  });
});
