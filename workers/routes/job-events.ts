/**
 * GET /v1/jobs/:id/events — the job's event stream (SSE). The gateway checks once that the job
 * is the tenant's, then hands the request to the job's JobEvents object, which replays from the
 * cursor and stays subscribed. A reconnecting browser sends Last-Event-ID with the URL it first
 * used, so the header wins over `?after=`.
 */
import { ACCESS_TOKEN_PARAM } from "../../src/contracts/access";
import { ApiError } from "../../src/contracts/errors";
import { EVENT_TYPES, TERMINAL_EVENT_TYPES } from "../../src/contracts/events";
import { jobIdParam, ref, V1_ERRORS } from "../../src/contracts/openapi";
import { SSE_FINISHED_STATUS, SSE_RETRY_MS } from "../../src/contracts/sse";
import { tenantJobId } from "../../src/db/jobs-repo";
import { knownJobOwner } from "../commands/job-owners";
import { callDependency, callDurableObject } from "../deps";
import { acquireStreamSlotJoined, settleLeases } from "../durable-objects/tenant-streams/stream-leases";
import { missingJob } from "./jobs";
import { route, routes } from "./route";
import { parseTreeCursor, treeEventStream } from "./tree-events";

export function parseEventCursor(lastEventId: string | undefined, after: string | undefined): number {
  const raw = lastEventId ?? after;
  if (raw === undefined || raw === "") return 0;
  const n = /^\d{1,15}$/.test(raw.trim()) ? Number(raw.trim()) : Number.NaN;
  if (!Number.isSafeInteger(n)) {
    const field = lastEventId !== undefined ? "Last-Event-ID" : "after";
    throw new ApiError("invalid_request", `${field}: must be a non-negative integer event id`);
  }
  return n;
}

export const jobEventRoutes = routes(
  route({
    method: "get",
    path: "/:id/events",
    operationId: "streamJobEvents",
    tag: "events",
    summary: "The job's events as Server-Sent Events, from its durable log, then live",
    description: `The stream opens with \`retry: ${SSE_RETRY_MS}\` (the reconnect delay), then one SSE frame per event: \`id\` is the job's event offset (from 1, no gaps), \`event\` the event type, \`data\` the EventEnvelope as one line of JSON. A comment line keeps the connection alive. The stream closes right after the terminal event. Resume with \`Last-Event-ID\` (wins) or \`after\`: only events with a larger id follow. A finished job with nothing after the cursor answers ${SSE_FINISHED_STATUS}, which stops a browser's EventSource. A browser's EventSource passes a token in \`${ACCESS_TOKEN_PARAM}\`.`,
    auth: "url_token",
    parameters: [
      jobIdParam,
      {
        name: "Last-Event-ID",
        in: "header",
        required: false,
        description: "Resume after this event id (a non-negative integer).",
        schema: { type: "string" },
      },
      {
        name: "after",
        in: "query",
        required: false,
        description: "Resume after this event id, when the client cannot set Last-Event-ID.",
        schema: { type: "string" },
      },
      {
        name: "include",
        in: "query",
        required: false,
        description:
          "`descendants`: one stream of the job and every child job its delegate calls created (and theirs), interleaved; each `data` is that job's envelope (its `job_id`), each `id` a composite cursor (`t1.…`) to resume the whole tree with.",
        schema: { type: "string", enum: ["descendants"] },
      },
    ],
    responses: [
      {
        status: 200,
        description: "The event stream.",
        content: {
          "text/event-stream": {
            schema: { type: "string", description: "SSE frames; each `data` line is an EventEnvelope." },
          },
        },
        extensions: {
          "x-sse-retry-ms": SSE_RETRY_MS,
          "x-sse-data": ref("EventEnvelope"),
          "x-sse-event-types": [...EVENT_TYPES],
          "x-sse-terminal-event-types": [...TERMINAL_EVENT_TYPES],
        },
      },
      {
        status: SSE_FINISHED_STATUS,
        description: "The job is finished and nothing is after the cursor: do not reconnect (no body).",
      },
    ],
    errors: ["invalid_request", "not_found", "gone", "events_expired", ...V1_ERRORS],
    handler: async (c) => {
      const include = c.req.query("include");
      if (include !== undefined && include !== "descendants") {
        throw new ApiError("invalid_request", 'include: the only value is "descendants"');
      }
      const tree = include === "descendants";
      const after = tree ? 0 : parseEventCursor(c.req.header("last-event-id"), c.req.query("after"));
      const treeCursor = tree ? parseTreeCursor(c.req.header("last-event-id"), c.req.query("after")) : null;
      const db = c.get("deps").db();
      const id = c.req.param("id");
      // A job this isolate created moments ago needs no tenant check in Postgres (job-owners.ts).
      const job = knownJobOwner(id, c.get("tenantId"))
        ? { id, finishedAt: null }
        : await callDependency("postgres", () => tenantJobId(db, c.get("tenantId"), id));
      if (!job) throw await missingJob(db, c.get("tenantId"), id);
      // The object deletes its log at its terminal event + the retention, and its terminal event is
      // never earlier than the row's finished_at (the row is written first), so this answers 410
      // whenever the log may be gone: an emptied object is never asked, so it never replays nothing
      // as if the job had no events.
      if (job.finishedAt && Date.now() - job.finishedAt.getTime() >= c.get("config").eventRetentionMs) {
        throw new ApiError(
          "events_expired",
          "this job's events were deleted: it finished longer ago than the event retention (JOB_EVENTS_RETENTION_S); GET /v1/jobs/{id} still has its result",
        );
      }
      const jobId = job.id;
      const tenantId = c.get("tenantId");
      const cap = c.get("config").limits.maxStreamsPerTenant;
      const stub = c.env.JOB_EVENTS.get(c.env.JOB_EVENTS.idFromName(jobId));
      // The object takes the tenant's stream slot before it subscribes (429 past the cap).
      const counted = `tenant_id=${encodeURIComponent(tenantId)}&stream_cap=${cap}`;
      if (treeCursor) {
        return callDurableObject(() => treeEventStream(c.env, db, tenantId, jobId, treeCursor, counted));
      }
      // The slot is taken here, joined with this tenant's other opens in flight (one counter call
      // for a burst, stream-leases.ts); the object holds the lease, or releases it when it does
      // not subscribe. Refused here, the object decides as before: a finished job's replay takes
      // no slot, so it is not refused at the cap.
      const slot = await acquireStreamSlotJoined(c.env, tenantId, "sse", cap, (work) => c.executionCtx.waitUntil(work));
      const lease = typeof slot === "string" ? slot : null;
      const params = lease ? `tenant_id=${encodeURIComponent(tenantId)}&lease=${encodeURIComponent(lease)}` : counted;
      try {
        return await callDurableObject(() =>
          stub.fetch(`https://job-events/events?after=${after}&job_id=${jobId}&${params}`),
        );
      } catch (err) {
        if (lease) c.executionCtx.waitUntil(settleLeases(c.env, tenantId, "release", [lease]));
        throw err;
      }
    },
  }),
);
