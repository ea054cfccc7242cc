/**
 * POST /internal/events — hosts deliver outbox batches here. No API key: the request is HMAC-signed
 * with INTERNAL_SIGNING_SECRET (src/domain/signing.ts). The signature is checked over the raw
 * bytes before anything is parsed, so a forged, tampered or stale request writes nothing; the
 * job's JobEvents object remembers nonces and answers a replay with 409.
 */
import { Hono } from "hono";
import { ApiError, INTERNAL_HEADERS, IngestBatchSchema } from "../../src/contracts";
import { verifyRequest } from "../../src/domain/signing";
import { callDurableObject } from "../deps";
import { batchShapeError } from "../durable-objects/event-log";
import type { IngestResult } from "../durable-objects/job-events";
import { parseJson, readBodyText, requireJsonContentType, validate } from "../request/body";
import type { GatewayEnv } from "../types";

export const INGEST_PATH = "/internal/events";
/** A batch holds up to 1000 events; model deltas are small, so 1 MiB is ample and still bounded. */
export const INGEST_MAX_BODY_BYTES = 1024 * 1024;

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
  const batch = validate(IngestBatchSchema, parseJson(raw));
  const shapeError = batchShapeError(batch.job_id, batch.events);
  if (shapeError) throw new ApiError("invalid_request", shapeError);

  const stub = c.env.JOB_EVENTS.get(c.env.JOB_EVENTS.idFromName(batch.job_id));
  // The RPC stub's union type is unwieldy; the method's own return type is the contract.
  const result = await callDurableObject<IngestResult>(
    async () => (await stub.ingest(batch, signed.nonce as string)) as IngestResult,
  );
  if (!result.ok) throw new ApiError("conflict", `${result.reason}: ${result.message}`);
  return c.json(result.ack);
});
