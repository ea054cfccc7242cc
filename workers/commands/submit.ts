/**
 * Submit a job: the row in Postgres is the job, so the caller answers once `createJob` commits.
 * Then, for a new job, the Redis ready-index ZADD that wakes a claimer: an accelerator (hosts
 * also LISTEN for `ear_ready` and sweep Postgres for queued jobs). Used by POST /v1/jobs and by a
 * chat message (ChatSession).
 */
import type { CreateJobBody } from "../../src/contracts/job";
import { type CreatedJob, createJob } from "../../src/db/jobs-repo";
import { redisKeys } from "../../src/quota/keys";
import { callDependency, type Deps } from "../deps";
import { accelerate } from "./redis-accelerator";

const keys = redisKeys();

export interface SubmitOptions {
  /** The tenant's cap on queued jobs (0: none). */
  maxQueued: number;
  /** What the idempotency key is bound to, when not the body itself (a chat message's content). */
  requestHash?: string;
}

/** `defer`, when given, takes the ZADD instead of it being awaited (see accelerate). */
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
    const jobId = created.job.id;
    await accelerate(
      deps,
      (redis) => redis.zadd(keys.readyIndex(), { score: Date.now(), member: jobId }),
      { msg: "ready index ZADD failed; hosts will find the job in Postgres", fields: { jobId } },
      defer,
    );
  }
  return created;
}
