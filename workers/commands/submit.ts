/**
 * Submit a job: the row in Postgres is the job, so the caller answers once `createJob` commits.
 * Then, for a new job, the Redis ready-index ZADD that wakes a claimer: an accelerator (hosts
 * also LISTEN for `ear_ready` and sweep Postgres for queued jobs). Used by POST /v1/jobs and by a
 * chat message (ChatSession).
 *
 * A body naming an `agent` is resolved first, to the version the job will run (one read; a job
 * without an agent stays one round trip): the row records that version with its model, tools and
 * timeout, so a version created after the submit never reaches this job.
 */
import { parseAgentRef } from "../../src/contracts/agent";
import { ApiError } from "../../src/contracts/errors";
import type { CreateJobBody } from "../../src/contracts/job";
import { getAgentVersion } from "../../src/db/agents-repo";
import type { Db } from "../../src/db/client";
import { type CreatedJob, createJob, findReplay, type ResolvedAgent } from "../../src/db/jobs-repo";
import { toolNames } from "../../src/domain/approval";
import type { ModelCatalog } from "../../src/domain/models";
import { redisKeys } from "../../src/quota/keys";
import { callDependency, type Deps } from "../deps";
import { assertModelOffered } from "./models";
import { accelerate } from "./redis-accelerator";

const keys = redisKeys();

export interface SubmitOptions {
  /** The tenant's cap on queued jobs (0: none). */
  maxQueued: number;
  /** The operator's models (GatewayConfig.models): a job's or its agent's model must be offered to the tenant. */
  models: ModelCatalog;
  /** What the idempotency key is bound to, when not the body itself (a chat message's content). */
  requestHash?: string;
}

/**
 * The agent version `body.agent` names for this tenant, checked for use: a known agent (400
 * otherwise), not archived (409 `conflict`), whose model the operator still offers the tenant
 * (400). Undefined when the body names no agent.
 */
export async function resolveJobAgent(
  db: Db,
  models: ModelCatalog,
  tenantId: string,
  body: Pick<CreateJobBody, "agent" | "model" | "tools">,
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
  assertModelOffered(models, tenantId, definition.model, `agent: ${view.name}@${view.version}'s model`);
  return {
    name: view.name,
    version: view.version,
    model: definition.model,
    tools: toolNames(definition.tools),
    timeoutMs: definition.limits.timeout_s === null ? null : definition.limits.timeout_s * 1000,
  };
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
  if (body.agent === undefined) {
    // A job naming no model runs on the deployment's default, which an allow-list may also close
    // to this tenant (the host does not check tenants).
    const model = body.model ?? opts.models.entries[0]?.name;
    const field = body.model === undefined ? "model (omitted, so the default)" : "model";
    if (model !== undefined) assertModelOffered(opts.models, tenantId, model, field);
  }
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
    }),
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
