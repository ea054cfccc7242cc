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
 *
 * The shared secret only proves "one of our hosts sent this request". Which jobs it may write is
 * each batch's `mac`, made with a key derived from its execution's claim token; the job's object
 * checks it (job-events-object.ts). The route only makes sure a batch names a job by UUID before any
 * object is named, and hands the object the events' exact JSON the mac covers.
 */
import { ApiError } from "../../src/contracts/errors";
import {
  INTERNAL_HEADERS,
  type IngestBatch,
  IngestBatchSchema,
  type IngestMultiResult,
  IngestMultiSchema,
} from "../../src/contracts/events";
import { BODY_ERRORS, internalHeaderParams, ref } from "../../src/contracts/openapi";
import { verifyRequest } from "../../src/domain/signing";
import { isUuid } from "../../src/domain/uuid";
import { callDurableObject, withTimeout } from "../deps";
import { batchShapeError } from "../durable-objects/job-events/event-log";
import type { IngestResult } from "../durable-objects/rpc";
import { log, loggableError } from "../log";
import { parseJson, readBodyText, refuseDeepJson, requireJsonContentType, validate } from "../request/body";
import type { GatewayEnv } from "../types";
import { route, routes } from "./route";

export const INGEST_PATH = "/internal/events";
/** A batch holds up to 1000 events; model deltas are small, so 1 MiB is ample and still bounded. */
export const INGEST_MAX_BODY_BYTES = 1024 * 1024;
/**
 * One job's object slower than this answers 503 for its batch, so a busy object cannot hold up
 * the other jobs of a host's request; the host resends that batch (a late append is then a
 * duplicate, dropped by (execution_id, seq)).
 */
export const INGEST_OBJECT_TIMEOUT_MS = 3000;
/**
 * How deeply a request may nest (the batch wrapper, the envelope and its payload included). A
 * 20,000-deep payload blew the stack of the call into the job's object and came back as 503,
 * which a host retries; past this it is 400. Far beyond what a tool's arguments or result need
 * (test/workers/internal-events.test.ts stores 240 levels).
 */
export const INGEST_MAX_DEPTH = 256;

export const internalEventRoutes = routes(
  route({
    method: "post",
    path: INGEST_PATH,
    operationId: "ingestEvents",
    tag: "internal",
    summary: "Hosts deliver outbox batches (signed; not for API clients)",
    description:
      "The signature (INTERNAL_SIGNING_SECRET or, during a rotation, INTERNAL_SIGNING_SECRET_PREVIOUS) is checked over the raw body before anything is parsed. Each batch also carries `mac`, keyed by its execution's claim token, which the job's object checks against Postgres the first time it sees that execution (403 `forbidden` when the execution does not own the job or the mac is wrong). One job's batch answers its ack (or the error with that status); a multi-job request answers 200 with one result per batch, in request order.",
    auth: "signature",
    parameters: internalHeaderParams,
    // Read here, not by the body reader: the signature covers the raw bytes, checked before any parse.
    requestBody: { oneOf: [ref("IngestBatch"), ref("IngestMulti")] },
    responses: [
      {
        status: 200,
        description: "The batch's ack (one job), or one result per batch (many jobs).",
        schema: { oneOf: [ref("IngestAck"), ref("IngestMultiAnswer")] },
      },
    ],
    errors: [...BODY_ERRORS, "unauthorized", "forbidden", "conflict", "dependency_unavailable", "internal"],
    handler: async (c) => {
      requireJsonContentType(c.req.raw);
      const raw = await readBodyText(c.req.raw, INGEST_MAX_BODY_BYTES);
      const signed = {
        timestamp: c.req.header(INTERNAL_HEADERS.timestamp),
        nonce: c.req.header(INTERNAL_HEADERS.nonce),
        signature: c.req.header(INTERNAL_HEADERS.signature),
      };
      const verdict = await verifyRequest(c.get("config").signingSecrets, "POST", INGEST_PATH, raw, signed);
      if (!verdict.ok) {
        log.warn("rejected internal request", { reason: verdict.reason });
        throw new ApiError("unauthorized", `request signature rejected (${verdict.reason})`);
      }
      refuseDeepJson(raw, INGEST_MAX_DEPTH);
      const body = parseJson(raw);
      const nonce = signed.nonce as string;
      if (typeof body === "object" && body !== null && "batches" in body) {
        // Taken before zod (which may strip or reorder keys): these are the bytes the macs cover.
        const rawBatches = (body as { batches: unknown }).batches;
        const eventsJson = Array.isArray(rawBatches) ? rawBatches.map(eventsJsonOf) : [];
        const multi = validate(IngestMultiSchema, body);
        const results = await Promise.all(multi.batches.map((b, i) => ingestOne(c.env, b, eventsJson[i] ?? "", nonce)));
        return c.json({ results });
      }
      const eventsJson = eventsJsonOf(body);
      const result = await ingestOne(c.env, validate(IngestBatchSchema, body), eventsJson, nonce);
      if (result.status === 200) return c.json(result.ack);
      throw new ApiError(result.error.code, result.error.message);
    },
  }),
);

/**
 * `JSON.stringify(batch.events)` as JSON.parse returned them. A host serializes its events once
 * and builds the body around that text; V8's parse → stringify of JSON.stringify output gives
 * back the same bytes (property-tested in test/unit/signing.test.ts), so this is what it signed.
 */
function eventsJsonOf(batch: unknown): string {
  const events = typeof batch === "object" && batch !== null ? (batch as { events?: unknown }).events : undefined;
  return JSON.stringify(events) ?? "";
}

/** Why a batch is refused, by the status the host sees: 403 is "not yours to write", never retried. */
const REJECTION_STATUS = {
  unknown_execution: 403,
  wrong_epoch: 403,
  bad_mac: 403,
  terminal_disagrees: 409,
  replayed_nonce: 409,
  stale_epoch: 409,
  epoch_taken: 409,
  job_finished: 409,
  invalid_batch: 409,
} as const;

/** One job's batch into its JobEvents object; failures become a per-batch status, never a throw. */
async function ingestOne(
  env: GatewayEnv["Bindings"],
  batch: IngestBatch,
  eventsJson: string,
  nonce: string,
): Promise<IngestMultiResult> {
  const job_id = batch.job_id;
  // Before any object is named: a job id that is not a UUID names no job, and naming an object
  // for it would create one.
  if (!isUuid(job_id))
    return { job_id, status: 400, error: { code: "invalid_request", message: "job_id must be a UUID" } };
  const shapeError = batchShapeError(batch.job_id, batch.events);
  if (shapeError) return { job_id, status: 400, error: { code: "invalid_request", message: shapeError } };
  const stub = env.JOB_EVENTS.get(env.JOB_EVENTS.idFromName(batch.job_id));
  let result: IngestResult;
  try {
    // The RPC stub's union type is unwieldy; the method's own return type is the contract.
    result = await withTimeout(
      callDurableObject<IngestResult>(async () => (await stub.ingest(batch, nonce, eventsJson)) as IngestResult),
      INGEST_OBJECT_TIMEOUT_MS,
      "the job's event log",
    );
  } catch (err) {
    // Busy or broken object: the host retries this job's batch later; the others are unaffected.
    if (!(err instanceof ApiError)) log.error("ingest into JobEvents failed", { job_id, error: err });
    return {
      job_id,
      status: 503,
      error: { code: "dependency_unavailable", message: loggableError(err) },
    };
  }
  if (!result.ok) {
    const message = `${result.reason}: ${result.message}`;
    if (result.reason === "unavailable")
      return { job_id, status: 503, error: { code: "dependency_unavailable", message } };
    const status = REJECTION_STATUS[result.reason];
    return { job_id, status, error: { code: status === 403 ? "forbidden" : "conflict", message } };
  }
  return { job_id, status: 200, ack: result.ack };
}
