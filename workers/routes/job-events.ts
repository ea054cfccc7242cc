/**
 * GET /v1/jobs/:id/events — the job's event stream (SSE). The gateway checks once that the job
 * is the tenant's, then hands the request to the job's JobEvents object, which replays from the
 * cursor and stays subscribed. A reconnecting browser sends Last-Event-ID with the URL it first
 * used, so the header wins over `?after=`.
 */
import { Hono } from "hono";
import { ApiError } from "../../src/contracts/errors";
import { tenantJobId } from "../../src/db/jobs-repo";
import { callDependency, callDurableObject } from "../deps";
import type { GatewayEnv } from "../types";
import { missingJob } from "./jobs";
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

export const jobEventRoutes = new Hono<GatewayEnv>().get("/:id/events", async (c) => {
  const include = c.req.query("include");
  if (include !== undefined && include !== "descendants") {
    throw new ApiError("invalid_request", 'include: the only value is "descendants"');
  }
  const tree = include === "descendants";
  const after = tree ? 0 : parseEventCursor(c.req.header("last-event-id"), c.req.query("after"));
  const treeCursor = tree ? parseTreeCursor(c.req.header("last-event-id"), c.req.query("after")) : null;
  const db = c.get("deps").db();
  const job = await callDependency("postgres", () => tenantJobId(db, c.get("tenantId"), c.req.param("id")));
  if (!job) throw await missingJob(db, c.get("tenantId"), c.req.param("id"));
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
  const stub = c.env.JOB_EVENTS.get(c.env.JOB_EVENTS.idFromName(jobId));
  // The object takes the tenant's stream slot before it subscribes (429 past the cap).
  const counted = `tenant_id=${encodeURIComponent(c.get("tenantId"))}&stream_cap=${c.get("config").limits.maxStreamsPerTenant}`;
  if (treeCursor) {
    return callDurableObject(() => treeEventStream(c.env, db, c.get("tenantId"), jobId, treeCursor, counted));
  }
  return callDurableObject(() => stub.fetch(`https://job-events/events?after=${after}&job_id=${jobId}&${counted}`));
});
