/**
 * Submit a job: the row in Postgres is the job, so the caller answers once `createJob` commits.
 * Then, for a new job, the Redis ready-index ZADD that wakes a claimer. The index is an
 * accelerator (hosts also LISTEN for `ear_ready` and sweep Postgres for queued jobs), so a failed
 * ZADD is logged, not raised. Used by POST /v1/jobs and by a chat message (ChatSession).
 */
import type { CreateJobBody } from "../../src/contracts";
import { type CreatedJob, createJob } from "../../src/db/jobs-repo";
import { redisKeys } from "../../src/quota/keys";
import { callDependency, type Deps, withTimeout } from "../deps";
import { log } from "../log";

const READY_INDEX_TIMEOUT_MS = 500;
const keys = redisKeys();

export interface SubmitOptions {
  /** The tenant's cap on queued jobs (0: none). */
  maxQueued: number;
  /** What the idempotency key is bound to, when not the body itself (a chat message's content). */
  requestHash?: string;
}

/**
 * `defer`, when given, takes the ZADD instead of it being awaited (the route passes `waitUntil`):
 * the answer only has to wait for what makes the job exist, the row.
 */
export async function submitJob(
  deps: Deps,
  tenantId: string,
  body: CreateJobBody,
  opts: SubmitOptions,
  defer?: (work: Promise<unknown>) => void,
): Promise<CreatedJob> {
  const db = deps.db();
  const created = await callDependency("postgres", () =>
    createJob(db, tenantId, crypto.randomUUID(), body, { maxQueued: opts.maxQueued, requestHash: opts.requestHash }),
  );
  if (created.created) {
    const wake = indexReadyJob(deps, created.job.id);
    if (defer) defer(wake);
    else await wake;
  }
  return created;
}

async function indexReadyJob(deps: Deps, jobId: string): Promise<void> {
  try {
    await withTimeout(
      deps.redis().zadd(keys.readyIndex(), { score: Date.now(), member: jobId }),
      READY_INDEX_TIMEOUT_MS,
      "redis",
    );
  } catch (err) {
    log.warn("ready index ZADD failed; hosts will find the job in Postgres", { jobId, error: err });
  }
}
