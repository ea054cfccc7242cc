/**
 * POST /internal/events — hosts deliver outbox batches here. No API key: the request is HMAC-signed
 * with INTERNAL_SIGNING_SECRET (src/domain/signing.ts). The signature is checked over the raw
 * bytes before anything is parsed, so a forged, tampered or stale request writes nothing; the
 * job's JobEvents object remembers nonces and answers a replay with 409.
 *
 * Two body shapes: `{job_id, events}` (one job; the answer is its ack or an error status) and
 * `{batches: [{job_id, events}, ...]}` (a host's whole flush; each batch goes to its own job's
 * object in parallel and the answer is 200 with one result per batch, so one job's rejection or
 * busy object never fails the others). Each object checks the request's nonce in its own log,
 * so replaying a multi-job request is refused by every job it names.
 */
import { Hono } from "hono";
import {
  ApiError,
  INTERNAL_HEADERS,
  type IngestBatch,
  IngestBatchSchema,
  type IngestMultiResult,
  IngestMultiSchema,
} from "../../src/contracts";
import { verifyRequest } from "../../src/domain/signing";
import { callDurableObject, withTimeout } from "../deps";
import { batchShapeError } from "../durable-objects/event-log";
import type { IngestResult } from "../durable-objects/job-events";
import { parseJson, readBodyText, requireJsonContentType, validate } from "../request/body";
import type { GatewayEnv } from "../types";

export const INGEST_PATH = "/internal/events";
/** A batch holds up to 1000 events; model deltas are small, so 1 MiB is ample and still bounded. */
export const INGEST_MAX_BODY_BYTES = 1024 * 1024;
/**
 * One job's object slower than this answers 503 for its batch, so a busy object cannot hold up
 * the other jobs of a host's request; the host resends that batch (a late append is then a
 * duplicate, dropped by (execution_id, seq)).
 */
export const INGEST_OBJECT_TIMEOUT_MS = 3000;

export const internalEventRoutes = new Hono<GatewayEnv>().post(INGEST_PATH, async (c) => {
  requireJsonContentType(c.req.raw);
  const raw = await readBodyText(c.req.raw, INGEST_MAX_BODY_BYTES);
  const signed = {
    timestamp: c.req.header(INTERNAL_HEADERS.timestamp),
    nonce: c.req.header(INTERNAL_HEADERS.nonce),
    signature: c.req.header(INTERNAL_HEADERS.signature),
  };
  const verdict = await verifyRequest(c.get("config").signingSecret, "POST", INGEST_PATH, raw, signed);
  if (!verdict.ok) {
    console.warn(JSON.stringify({ msg: "rejected internal request", reason: verdict.reason }));
    throw new ApiError("unauthorized", `request signature rejected (${verdict.reason})`);
  }
  const body = parseJson(raw);
  const nonce = signed.nonce as string;
  if (typeof body === "object" && body !== null && "batches" in body) {
    const multi = validate(IngestMultiSchema, body);
    const results = await Promise.all(multi.batches.map((b) => ingestOne(c.env, b, nonce)));
    return c.json({ results });
  }
  const result = await ingestOne(c.env, validate(IngestBatchSchema, body), nonce);
  if (result.status === 200) return c.json(result.ack);
  throw new ApiError(result.error.code, result.error.message);
});

/** One job's batch into its JobEvents object; failures become a per-batch status, never a throw. */
async function ingestOne(env: GatewayEnv["Bindings"], batch: IngestBatch, nonce: string): Promise<IngestMultiResult> {
  const job_id = batch.job_id;
  const shapeError = batchShapeError(batch.job_id, batch.events);
  if (shapeError) return { job_id, status: 400, error: { code: "invalid_request", message: shapeError } };
  const stub = env.JOB_EVENTS.get(env.JOB_EVENTS.idFromName(batch.job_id));
  let result: IngestResult;
  try {
    // The RPC stub's union type is unwieldy; the method's own return type is the contract.
    result = await withTimeout(
      callDurableObject<IngestResult>(async () => (await stub.ingest(batch, nonce)) as IngestResult),
      INGEST_OBJECT_TIMEOUT_MS,
      "the job's event log",
    );
  } catch (err) {
    // Busy or broken object: the host retries this job's batch later; the others are unaffected.
    if (!(err instanceof ApiError))
      console.error(JSON.stringify({ msg: "ingest into JobEvents failed", job_id, error: String(err) }));
    return {
      job_id,
      status: 503,
      error: { code: "dependency_unavailable", message: err instanceof Error ? err.message : String(err) },
    };
  }
  if (!result.ok)
    return { job_id, status: 409, error: { code: "conflict", message: `${result.reason}: ${result.message}` } };
  return { job_id, status: 200, ack: result.ack };
}
