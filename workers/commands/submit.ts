/**
 * Submit a job: the row in Postgres is the job, so the caller answers once `createJob` commits.
 * Then, for a new job, the Redis ready-index ZADD that wakes a claimer: an accelerator (hosts
 * also LISTEN for `ear_ready` and sweep Postgres for queued jobs). Used by POST /v1/jobs and by a
 * chat message (ChatSession). `submitJobs` is POST /v1/jobs/batch: the same checks per item, then
 * one statement for every row (createJobs) and one ZADD for every new job.
 *
 * A body naming an `agent` is resolved first, to the version the job will run (one read; a job
 * without an agent stays one round trip): the row records that version with its model, tools and
 * timeout, so a version created after the submit never reaches this job.
 */
import { agentModels, agentPriority, limitsAboveAgent, parseAgentRef } from "../../src/contracts/agent";
import { ApiError } from "../../src/contracts/errors";
import { type CreateJobBody, CreateJobBodySchema } from "../../src/contracts/job";
import { getAgentVersion } from "../../src/db/agents-repo";
import { budgetExceeded } from "../../src/db/budget-repo";
import type { Db } from "../../src/db/client";
import {
  type BatchItem,
  type BatchRefusal,
  type CreatedJob,
  createJob,
  createJobs,
  type ForkOf,
  findReplay,
  idempotencyMismatch,
  type ResolvedAgent,
} from "../../src/db/jobs-repo";
import type { JobRow } from "../../src/db/schema";
import { toolNames } from "../../src/domain/approval";
import {
  type AdmissionRules,
  assertAdmitted,
  planRefusal,
  QUEUE_FULL_RETRY_AFTER_S,
} from "../../src/domain/job-admission";
import type { ModelCatalog } from "../../src/domain/models";
import { jobRequestHash } from "../../src/domain/request-hash";
import { indexAndWake } from "../../src/quota/fleet-wake";
import { redisKeys } from "../../src/quota/keys";
import { readyScore } from "../../src/quota/ready-index";
import { callDependency, type Deps } from "../deps";
import type { GatewayConfig } from "../gateway-config";
import { describeZodError } from "../request/body";
import { rememberJobOwner } from "./job-owners";
import { accelerate } from "./redis-accelerator";

const keys = redisKeys();

/**
 * Job admission's rules (src/domain/job-admission.ts): the tenant's cap on queued jobs (0: none)
 * and the operator's models (GatewayConfig.models), of which a job's or its agent's model must be
 * offered to the tenant.
 */
export interface SubmitOptions extends AdmissionRules {
  /** What the idempotency key is bound to, when not the body itself (a chat message's content). */
  requestHash?: string;
  /** The request's W3C traceparent, kept with the job when valid (src/domain/traceparent.ts). */
  traceparent?: string | null;
  /** Whether the operator lets a client's traceparent parent the run (OTEL_TRUST_CLIENT_SAMPLING); else it is a link. */
  trustClientTrace?: boolean;
  /** The job is a fork of another (commands/fork.ts): its journal starts as that job's prefix. */
  fork?: ForkOf;
}

/** The deployment's admission rules for a job the API makes (a fork, a replay's, an eval's). */
export const submitOptions = (config: GatewayConfig): SubmitOptions => ({
  maxQueued: config.limits.maxQueuedJobsPerTenant,
  models: config.models,
});

/**
 * The agent version `body.agent` names for this tenant, checked for use: a known agent (400
 * otherwise), not archived (409 `conflict`), whose model and tools the tenant may still use (400,
 * job admission's checks 1 and 2: src/domain/job-admission.ts). Undefined when the body names no agent.
 */
export async function resolveJobAgent(
  db: Db,
  models: ModelCatalog,
  tenantId: string,
  body: Pick<CreateJobBody, "agent" | "model" | "tools" | "limits">,
): Promise<ResolvedAgent | undefined> {
  if (body.agent === undefined) return undefined;
  if (body.model !== undefined || body.tools !== undefined) {
    throw new ApiError(
      "invalid_request",
      "agent: give either `agent` or `model`/`tools`, not both: the agent's version fixes the model and the tools",
    );
  }
  const ref = parseAgentRef(body.agent);
  if (!ref) throw new ApiError("invalid_request", 'agent: must be an agent name or "name@version"');
  const found = await callDependency("postgres", () => getAgentVersion(db, tenantId, ref.name, ref.version));
  if (!found) {
    throw new ApiError(
      "invalid_request",
      ref.version === null
        ? `agent: no agent named "${ref.name}" (GET /v1/agents)`
        : `agent: "${ref.name}" has no version ${ref.version} (GET /v1/agents/${ref.name}/versions)`,
    );
  }
  if (found.archived) {
    throw new ApiError("conflict", `agent: "${ref.name}" is archived; no new jobs may run it`);
  }
  const { definition, view } = found;
  const above = limitsAboveAgent(definition.limits, body.limits);
  if (above)
    throw new ApiError(
      "invalid_request",
      `limits.${above} (agent ${view.name}@${view.version}); a job may narrow its agent's limits, never widen them`,
    );
  const tools = toolNames(definition.tools);
  assertAdmitted(
    planRefusal(models, tenantId, { model: definition.model, tools }, `agent: ${view.name}@${view.version}'s `),
  );
  return {
    name: view.name,
    version: view.version,
    model: agentModels(definition)[0] as string,
    tools,
    timeoutMs: definition.limits.timeout_s === null ? null : definition.limits.timeout_s * 1000,
    priority: agentPriority(definition),
  };
}

/**
 * Job admission's checks 1 and 2 on a body without an agent, before any read: its model (the
 * deployment's default when it names none, which an allow-list may also close to this tenant;
 * the host does not check tenants) and its tools. The statement gates checks 3 and 4.
 */
export function assertBodyAdmitted(models: ModelCatalog, tenantId: string, body: CreateJobBody): void {
  if (body.agent !== undefined) return;
  assertAdmitted(planRefusal(models, tenantId, { model: body.model, tools: body.tools ?? [] }));
}

/**
 * The ready-index wake-up for new jobs: one command, however many, each scored by when it becomes
 * runnable (a delayed job's entry comes due at its run_at; claimers read only due entries), which
 * also pokes every sleeping host (src/quota/fleet-wake.ts: nothing more when none sleeps).
 */
export function wake(deps: Deps, created: JobRow[], defer?: (work: Promise<unknown>) => void): Promise<void> {
  const jobIds = created.map((j) => j.id);
  const [first, ...rest] = created.map((j) => ({ score: Math.max(Date.now(), readyScore(j)), member: j.id }));
  if (!first) return Promise.resolve();
  return accelerate(
    deps,
    (redis) => indexAndWake(redis, keys, [first, ...rest]),
    { msg: "ready index ZADD failed; hosts will find the job in Postgres", fields: { jobIds: jobIds.join(",") } },
    defer,
  );
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
  const started = Date.now();
  assertBodyAdmitted(opts.models, tenantId, body);
  let agent: ResolvedAgent | undefined;
  try {
    agent = await resolveJobAgent(db, opts.models, tenantId, body);
  } catch (err) {
    // A retry of a request that already made its job gets that job, even if its agent has been
    // archived (or its model withdrawn) since. Only on this path: a first submit pays no lookup.
    if (!(err instanceof ApiError) || err.status >= 500 || !body.idempotency_key) throw err;
    const replay = await callDependency("postgres", () =>
      findReplay(db, tenantId, body, { requestHash: opts.requestHash }),
    );
    if (replay) return replay;
    throw err;
  }
  const created = await callDependency("postgres", () =>
    createJob(db, tenantId, crypto.randomUUID(), body, {
      maxQueued: opts.maxQueued,
      requestHash: opts.requestHash,
      agent,
      traceparent: opts.traceparent ?? null,
      trustClientTrace: opts.trustClientTrace,
      fork: opts.fork,
    }),
  );
  if (created.created) {
    rememberJobOwner(created.job.id, tenantId, started);
    await wake(deps, [created.job], defer);
  }
  return created;
}

/**
 * `jobs[3].` before an item's refusal, so a refused batch names the item at fault; a 5xx (a
 * dependency down) is about the request, not the item, and goes out as it is.
 */
function atItem(index: number, err: unknown): unknown {
  if (!(err instanceof ApiError) || err.status >= 500) return err;
  return new ApiError(err.code, `jobs[${index}].${err.message}`, { cause: err, retryAfterS: err.retryAfterS });
}

/** The error for a batch createJobs refused; `itemOf` maps its index to the caller's item number. */
/**
 * A batch a command built itself (a replay's reruns, an eval's cases) into the queue: one
 * createJobs statement, all or none (a refusal is thrown as the API error), each job's owner
 * remembered and the claimers woken.
 */
export async function enqueueBatch(
  deps: Deps,
  tenantId: string,
  items: BatchItem[],
  opts: Pick<SubmitOptions, "maxQueued">,
  started: number,
  defer?: (work: Promise<unknown>) => void,
): Promise<void> {
  if (items.length === 0) return;
  const result = await callDependency("postgres", () =>
    createJobs(deps.db(), tenantId, items, { maxQueued: opts.maxQueued }),
  );
  if (!Array.isArray(result)) throw batchRefused(result, (index) => index);
  for (const c of result) rememberJobOwner(c.job.id, tenantId, started);
  await wake(
    deps,
    result.map((c) => c.job),
    defer,
  );
}

export function batchRefused(result: BatchRefusal, itemOf: (index: number) => number): ApiError {
  if (result.kind === "mismatch") return atItem(itemOf(result.index), idempotencyMismatch()) as ApiError;
  if (result.kind === "budget") return budgetExceeded(result.refusal);
  return new ApiError(
    "rate_limited",
    `this batch's ${result.fresh} new jobs do not fit under this tenant's limit of ${result.maxQueued} queued jobs; nothing was created`,
    { retryAfterS: QUEUE_FULL_RETRY_AFTER_S },
  );
}

/**
 * Every item of a batch checked as POST /v1/jobs checks one body (schema, its byte cap
 * `maxItemBytes` re-serialized, the model, the agent), then all rows in one statement: any
 * refusal names its item (`jobs[3].input.messages: …`) and creates nothing. Agents are read once
 * per distinct name, in parallel. A key repeated inside the batch is refused (the second could
 * only ever be a replay of the first). An item whose agent cannot be used any more but whose key
 * already made a job answers that job, as a single submit does.
 */
export async function submitJobs(
  deps: Deps,
  tenantId: string,
  raw: unknown[],
  opts: SubmitOptions & { maxItemBytes: number },
  defer?: (work: Promise<unknown>) => void,
): Promise<CreatedJob[]> {
  const db = deps.db();
  const started = Date.now();
  const encoder = new TextEncoder();
  const keysSeen = new Map<string, number>();
  const bodies = raw.map((item, i) => {
    const parsed = CreateJobBodySchema.safeParse(item);
    if (!parsed.success) throw new ApiError("invalid_request", describeZodError(parsed.error, `jobs[${i}]`));
    if (encoder.encode(JSON.stringify(item)).byteLength > opts.maxItemBytes) {
      throw new ApiError(
        "payload_too_large",
        `jobs[${i}]: exceeds ${opts.maxItemBytes} bytes (a single job's body cap)`,
      );
    }
    const key = parsed.data.idempotency_key;
    if (key !== undefined) {
      const first = keysSeen.get(key);
      if (first !== undefined) {
        throw new ApiError(
          "invalid_request",
          `jobs[${i}].idempotency_key: repeats jobs[${first}]'s; keys must differ within a batch`,
        );
      }
      keysSeen.set(key, i);
    }
    try {
      assertBodyAdmitted(opts.models, tenantId, parsed.data);
    } catch (err) {
      throw atItem(i, err);
    }
    return parsed.data;
  });
  // One read per distinct agent name (`model`/`tools` beside `agent` fail before any read).
  const agentReads = new Map<string, Promise<ResolvedAgent | undefined>>();
  const settled = await Promise.allSettled(
    bodies.map((body) => {
      if (body.agent === undefined || body.model !== undefined || body.tools !== undefined) {
        return resolveJobAgent(db, opts.models, tenantId, body);
      }
      const read = agentReads.get(body.agent) ?? resolveJobAgent(db, opts.models, tenantId, body);
      agentReads.set(body.agent, read);
      return read;
    }),
  );
  const answered = new Map<number, CreatedJob>();
  const items: BatchItem[] = [];
  const order: number[] = [];
  for (const [i, outcome] of settled.entries()) {
    const body = bodies[i] as CreateJobBody;
    if (outcome.status === "rejected") {
      const err = outcome.reason;
      if (!(err instanceof ApiError) || err.status >= 500 || !body.idempotency_key) throw atItem(i, err);
      let replay: CreatedJob | null;
      try {
        replay = await callDependency("postgres", () => findReplay(db, tenantId, body));
      } catch (replayErr) {
        throw atItem(i, replayErr);
      }
      if (!replay) throw atItem(i, err);
      answered.set(i, replay);
      continue;
    }
    const requestHash = body.idempotency_key ? await jobRequestHash(body) : null;
    items.push({ id: crypto.randomUUID(), body, agent: outcome.value, requestHash });
    order.push(i);
  }
  const result =
    items.length === 0
      ? []
      : await callDependency("postgres", () => createJobs(db, tenantId, items, { maxQueued: opts.maxQueued }));
  if (!Array.isArray(result)) throw batchRefused(result, (index) => order[index] ?? index);
  for (const [n, created] of result.entries()) answered.set(order[n] as number, created);
  const all = bodies.map((_, i) => answered.get(i) as CreatedJob);
  for (const c of all) if (c.created) rememberJobOwner(c.job.id, tenantId, started);
  await wake(
    deps,
    all.filter((c) => c.created).map((c) => c.job),
    defer,
  );
  return all;
}
