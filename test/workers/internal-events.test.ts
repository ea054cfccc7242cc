/** POST /internal/events: HMAC-signed host ingest — forged, tampered, stale and replayed requests write nothing. */
import { describe, expect, it } from "vitest";
import { INTERNAL_HEADERS } from "../../src/contracts/events";
import { type SignedHeaders, signRequest } from "../../src/domain/signing";
import {
  batch,
  gateway,
  type HostBatch,
  jobStub,
  newJob,
  offsets,
  signBatch,
  testEnv,
  useFakePostgres,
} from "./helpers";

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

/** A host's request: each batch signed with its execution's key, the whole with the shared secret. */
async function hostBody(batches: HostBatch[], nonce: string, multi: boolean): Promise<string> {
  const signed = [];
  for (const b of batches) {
    await useFakePostgres(jobStub(b.job_id), b.job_id);
    signed.push(await signBatch(b, nonce));
  }
  return JSON.stringify(multi ? { batches: signed } : signed[0]);
}

async function signedSend(b: HostBatch, opts: { secret?: string; now?: number } = {}) {
  const nonce = crypto.randomUUID();
  const body = await hostBody([b], nonce, false);
  const signed = await signRequest(
    opts.secret ?? testEnv.INTERNAL_SIGNING_SECRET,
    "POST",
    PATH,
    body,
    opts.now ?? Date.now(),
    nonce,
  );
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

  it("refuses a payload nested past the depth bound with 400 (not a 503 from a blown stack); one within it is stored", async () => {
    const nested = (depth: number): unknown => {
      let v: unknown = "bottom";
      for (let i = 0; i < depth; i++) v = [v];
      return v;
    };
    const deepBatch = (depth: number) => {
      const { jobId, stub } = newJob();
      const b = batch(jobId, "exec-a", 1, [1]);
      (b.events[0] as { type: string; payload: unknown }).type = "tool.call";
      (b.events[0] as { payload: unknown }).payload = { id: "c1", name: "shell", args: { v: nested(depth) } };
      return { b, stub };
    };
    const deep = deepBatch(20_000);
    const res = (await signedSend(deep.b)).res;
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("invalid_request");
    expect(body.error.message).toMatch(/nested deeper than 256/);
    expect(await offsets(deep.stub)).toEqual([]);

    const ok = deepBatch(240);
    expect((await signedSend(ok.b)).res.status).toBe(200);
    expect(await offsets(ok.stub)).toHaveLength(1);
  });

  it("maps a stale epoch to 409", async () => {
    const { jobId, stub } = newJob();
    expect((await signedSend(batch(jobId, "exec-b", 2, [1]))).res.status).toBe(200);
    const { res } = await signedSend(batch(jobId, "exec-a", 1, [1]));
    expect(res.status).toBe(409);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/^stale_epoch: /);
    expect((await offsets(stub)).map((e) => e.execution_id)).toEqual(["exec-b"]);
  });

  describe("a host's whole flush in one request ({batches})", () => {
    async function signedMulti(batches: HostBatch[]) {
      const nonce = crypto.randomUUID();
      const body = await hostBody(batches, nonce, true);
      const signed = await signRequest(testEnv.INTERNAL_SIGNING_SECRET, "POST", PATH, body, Date.now(), nonce);
      return { body, headers: headersOf(signed), res: await send(body, headersOf(signed)) };
    }

    it("delivers each job's batch to its own log and answers one result per batch, in order", async () => {
      const a = newJob();
      const b = newJob();
      const { res } = await signedMulti([batch(a.jobId, "exec-a", 1, [1, 2, 3]), batch(b.jobId, "exec-b", 1, [1])]);
      expect(res.status).toBe(200);
      const { results } = (await res.json()) as { results: Array<{ job_id: string; status: number; ack?: unknown }> };
      expect(results.map((r) => [r.job_id, r.status])).toEqual([
        [a.jobId, 200],
        [b.jobId, 200],
      ]);
      expect(results[0]?.ack).toMatchObject({ acked_seq: 3, accepted: 3 });
      expect((await offsets(a.stub)).map((e) => e.seq)).toEqual([1, 2, 3]);
      expect((await offsets(b.stub)).map((e) => e.seq)).toEqual([1]);
    });

    it("one job's rejection (stale epoch, bad shape) does not fail the others", async () => {
      const stale = newJob();
      expect((await signedSend(batch(stale.jobId, "exec-new", 2, [1]))).res.status).toBe(200);
      const good = newJob();
      const bad = newJob();
      const mixed = batch(bad.jobId, "exec-x", 1, [1, 2]);
      (mixed.events[1] as { execution_id: string }).execution_id = "exec-y";
      const { res } = await signedMulti([
        batch(stale.jobId, "exec-old", 1, [1]),
        batch(good.jobId, "exec-g", 1, [1]),
        mixed,
      ]);
      expect(res.status).toBe(200);
      const { results } = (await res.json()) as { results: Array<{ status: number; error?: { message: string } }> };
      expect(results.map((r) => r.status)).toEqual([409, 200, 400]);
      expect(results[0]?.error?.message).toMatch(/^stale_epoch: /);
      expect((await offsets(stale.stub)).map((e) => e.execution_id)).toEqual(["exec-new"]);
      expect((await offsets(good.stub)).map((e) => e.seq)).toEqual([1]);
      expect(await offsets(bad.stub)).toEqual([]);
    });

    it("a replayed multi-job request is refused by every job it names and writes nothing", async () => {
      const a = newJob();
      const b = newJob();
      const first = await signedMulti([batch(a.jobId, "exec-a", 1, [1]), batch(b.jobId, "exec-b", 1, [1])]);
      expect(first.res.status).toBe(200);
      const again = await send(first.body, first.headers);
      expect(again.status).toBe(200);
      const { results } = (await again.json()) as { results: Array<{ status: number }> };
      expect(results.map((r) => r.status)).toEqual([409, 409]);
      expect((await offsets(a.stub)).map((e) => e.seq)).toEqual([1]);
      expect((await offsets(b.stub)).map((e) => e.seq)).toEqual([1]);
    });

    it("refuses a request naming one job twice, or with no batches, and writes nothing", async () => {
      const a = newJob();
      await expectError(
        (await signedMulti([batch(a.jobId, "exec-a", 1, [1]), batch(a.jobId, "exec-a", 1, [2])])).res,
        400,
        "invalid_request",
      );
      await expectError((await signedMulti([])).res, 400, "invalid_request");
      expect(await offsets(a.stub)).toEqual([]);
    });
  });
});
