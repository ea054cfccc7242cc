/**
 * The drizzle schema: the source of truth for Postgres. Migrations in drizzle/ are generated from
 * it by drizzle-kit and never hand-edited. Every ownership change on `jobs` is a conditional
 * UPDATE (see jobs-repo.ts); the five timing facts are nullable and written once each.
 */
import { sql } from "drizzle-orm";
import {
  bigint,
  boolean,
  check,
  foreignKey,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from "drizzle-orm/pg-core";
import { ADMISSION_LIMITS } from "../contracts/admission";
import type { AgentDefinition } from "../contracts/agent";
import { type ChatMessage, INPUT_STATUSES, JOB_STATES, type JobError, type ToolName } from "../contracts/job";
import { FINAL_STATES } from "../contracts/job-state";
import { WAIT_DECISIONS, WAIT_KINDS, type WaitingFor } from "../contracts/wait";

const tstz = (name: string) => timestamp(name, { withTimezone: true, mode: "date" });

/** `('a','b',…)` from a contract's list of values (constants of this repo, never input). */
const sqlList = (values: readonly string[]) => sql.raw(`(${values.map((v) => `'${v}'`).join(",")})`);

/** `('completed',…)`: the final states, for statements that must leave finished jobs alone. */
export const FINAL_STATES_SQL = sqlList(FINAL_STATES);

/**
 * The jobs a tenant holds slots with (claimed or running): the jobs_held_* predicates here and
 * the claim statement's counts (ownership-repo.ts). `table` qualifies the columns (an alias
 * written in this package, never input).
 */
export function held(table?: string) {
  const c = table ? `${table}.` : "";
  return sql.raw(`${c}owner IS NOT NULL AND ${c}state IN ('queued', 'running')`);
}
const HELD = held();

export const tenants = pgTable(
  "tenants",
  {
    id: text("id").primaryKey(),
    name: text("name").notNull(),
    createdAt: tstz("created_at").notNull().defaultNow(),
    // Admission (`npm run cli -- tenant set`, applied by the claim statement): the tenant's share
    // of the fleet's slots relative to the others, and its cap on held jobs (0 = none).
    weight: integer("weight").notNull().default(1),
    maxRunning: integer("max_running").notNull().default(0),
  },
  (t) => [
    check("tenants_weight_ck", sql`${t.weight} >= 1`),
    check("tenants_max_running_ck", sql`${t.maxRunning} >= 0`),
  ],
);

export const apiKeys = pgTable(
  "api_keys",
  {
    id: uuid("id").primaryKey().defaultRandom(),
    tenantId: text("tenant_id")
      .notNull()
      .references(() => tenants.id),
    prefix: text("prefix").notNull(),
    /** SHA-256 hex of the whole key; the key itself is shown once and never stored. */
    keyHash: text("key_hash").notNull(),
    name: text("name"),
    createdAt: tstz("created_at").notNull().defaultNow(),
    revokedAt: tstz("revoked_at"),
  },
  (t) => [uniqueIndex("api_keys_key_hash_uq").on(t.keyHash)],
);

export const jobs = pgTable(
  "jobs",
  {
    id: uuid("id").primaryKey(),
    tenantId: text("tenant_id")
      .notNull()
      .references(() => tenants.id),
    conversationId: text("conversation_id"),
    state: text("state").notNull().default("queued"),
    // Ownership and fencing: every owner write checks owner, epoch, token and execution_id, so a
    // stale owner's write hits zero rows (docs/architecture.md).
    owner: text("owner"),
    claimedAt: tstz("claimed_at"),
    epoch: integer("epoch").notNull().default(0),
    token: uuid("token"),
    executionId: uuid("execution_id"),
    executionStartedAt: tstz("execution_started_at"),
    heartbeatAt: tstz("heartbeat_at"),
    cancelRequestedAt: tstz("cancel_requested_at"),
    timeoutMs: integer("timeout_ms").notNull().default(900_000),
    deadlineAt: tstz("deadline_at"),
    /** Sandbox cleanup fence: true from sandbox creation until its deletion is confirmed. */
    cleanupPending: boolean("cleanup_pending").notNull().default(false),
    // The five timing facts.
    createdAt: tstz("created_at").notNull().defaultNow(),
    startedAt: tstz("started_at"),
    preparedAt: tstz("prepared_at"),
    firstOutputAt: tstz("first_output_at"),
    finishedAt: tstz("finished_at"),
    // Work.
    input: jsonb("input").$type<{ messages: ChatMessage[] }>().notNull(),
    output: text("output"),
    error: jsonb("error").$type<JobError>(),
    model: text("model"),
    tools: jsonb("tools").$type<ToolName[]>().notNull().default([]),
    metadata: jsonb("metadata").$type<Record<string, unknown>>().notNull().default({}),
    idempotencyKey: text("idempotency_key"),
    /** SHA-256 hex of the submitted body: a reused idempotency key with another body is a 409. */
    requestHash: text("request_hash"),
    // The agent version the job runs (resolved at submit; null: the built-in default agent).
    agentName: text("agent_name"),
    agentVersion: integer("agent_version"),
    /** The final answer parsed as JSON, when the agent has a response_format it satisfied. */
    outputJson: jsonb("output_json"),
    // Usage summed over the job's model calls (each call is also a model_usage row). Not
    // indexed, so the per-turn increment stays a HOT update.
    promptTokens: bigint("prompt_tokens", { mode: "number" }).notNull().default(0),
    completionTokens: bigint("completion_tokens", { mode: "number" }).notNull().default(0),
    modelCalls: integer("model_calls").notNull().default(0),
    /** True once any call's tokens were estimated because the provider reported none. */
    usageEstimated: boolean("usage_estimated").notNull().default(false),
    // What the job's inputs (job_inputs) take of LIMITS.maxInputsPerJob / maxInputBytesPerJob,
    // kept on the row submitInput locks so that the check and the count move together (counting
    // job_inputs read the statement's snapshot: a burst overshot the caps). Not indexed: HOT.
    inputCount: integer("input_count").notNull().default(0),
    inputBytes: bigint("input_bytes", { mode: "number" }).notNull().default(0),
    // The waitpoint (state `waiting`): what the job waits for (the public view shows it), when the
    // wait ends by itself, and the checkpoint the next execution resumes from. The checkpoint is
    // the host's (sandbox-host/runner/checkpoint.ts): the conversation so far with completed tool
    // results, the pending call and the calls after it, the turn count.
    waitingFor: jsonb("waiting_for").$type<WaitingFor>(),
    waitDeadlineAt: tstz("wait_deadline_at"),
    checkpoint: jsonb("checkpoint").$type<Record<string, unknown>>(),
    // Sub-agents: a child job made by a parent's delegate call (null on a submitted job). The
    // parent execution and call say which turn and which call the child answers; the root and
    // depth make the subtree one indexed read (cancel, tree, limits).
    parentJobId: uuid("parent_job_id"),
    parentExecutionId: uuid("parent_execution_id"),
    parentCallId: text("parent_call_id"),
    rootJobId: uuid("root_job_id"),
    depth: integer("depth").notNull().default(0),
    // Admission (docs/claims.md "Admission"): order inside the tenant's share, not claimable
    // before run_at, `expired` when not claimed by expires_at, one held job per concurrency key.
    priority: integer("priority").notNull().default(0),
    runAt: tstz("run_at"),
    expiresAt: tstz("expires_at"),
    concurrencyKey: text("concurrency_key"),
    /**
     * Which of its tenant's `max_running` slots a held job occupies (null for an uncapped tenant).
     * Unique among held jobs, so two hosts claiming at once cannot both fill the last slot.
     */
    tenantSlot: integer("tenant_slot"),
  },
  (t) => [
    check("jobs_state_ck", sql`${t.state} in ${sqlList(JOB_STATES)}`),
    uniqueIndex("jobs_tenant_idempotency_uq")
      .on(t.tenantId, t.idempotencyKey)
      .where(sql`${t.idempotencyKey} is not null`),
    index("jobs_tenant_created_idx").on(t.tenantId, t.createdAt.desc(), t.id.desc()),
    // Conversation reads always name one; jobs outside a conversation stay out of it (each of
    // their non-HOT lifecycle writes would otherwise add an entry).
    index("jobs_conversation_idx")
      .on(t.tenantId, t.conversationId, t.createdAt)
      .where(sql`${t.conversationId} is not null`),
    // The claim's per-tenant candidates, in the order it takes them.
    index("jobs_admission_idx")
      .on(t.tenantId, t.priority.desc(), t.createdAt)
      .where(sql`${t.state} = 'queued' and ${t.owner} is null`),
    // What each tenant holds (claimed or running): its share and its cap at claim.
    index("jobs_held_idx").on(t.tenantId).where(HELD),
    // The database, not the claimers' snapshots, keeps a key to one held job and a capped
    // tenant to max_running held jobs: a second claimer racing for either fails and retries.
    uniqueIndex("jobs_held_key_uq")
      .on(t.tenantId, t.concurrencyKey)
      .where(sql`${t.concurrencyKey} is not null and ${HELD}`),
    uniqueIndex("jobs_held_slot_uq").on(t.tenantId, t.tenantSlot).where(sql`${t.tenantSlot} is not null and ${HELD}`),
    // The expiry sweep (admission-repo.ts).
    index("jobs_expiry_idx").on(t.expiresAt).where(sql`${t.state} = 'queued' and ${t.expiresAt} is not null`),
    check(
      "jobs_priority_ck",
      sql`${t.priority} between ${sql.raw(String(ADMISSION_LIMITS.minPriority))} and ${sql.raw(String(ADMISSION_LIMITS.maxPriority))}`,
    ),
    // Candidate selection when the ready index is unavailable, and index rebuilds.
    index("jobs_ready_idx").on(t.createdAt).where(sql`${t.state} = 'queued' and ${t.owner} is null`),
    // Heartbeats and reaping of running jobs by owner.
    index("jobs_running_owner_idx").on(t.owner).where(sql`${t.state} = 'running'`),
    // The per-tenant queued-jobs limit counts these at submit.
    index("jobs_tenant_queued_idx").on(t.tenantId).where(sql`${t.state} = 'queued'`),
    // Hosts' reapers and the cron backstop end waits past their deadline.
    index("jobs_waiting_deadline_idx").on(t.waitDeadlineAt).where(sql`${t.state} = 'waiting'`),
    // A parent's children (its resume trigger, drizzle/0010) and a root's tree (cancel, GET …/tree).
    index("jobs_parent_idx").on(t.parentJobId).where(sql`${t.parentJobId} is not null`),
    index("jobs_root_idx").on(t.rootJobId).where(sql`${t.rootJobId} is not null`),
    // The retention purge (retention-repo.ts) takes the oldest finished jobs first; without it
    // each batch would scan every job.
    index("jobs_finished_idx")
      .on(t.finishedAt)
      .where(sql`${t.state} in ${sqlList(FINAL_STATES)}`),
  ],
);

export const executions = pgTable(
  "executions",
  {
    id: uuid("id").primaryKey(),
    jobId: uuid("job_id")
      .notNull()
      .references(() => jobs.id),
    host: text("host").notNull(),
    epoch: integer("epoch").notNull(),
    /**
     * The claim token this execution started under. Only Postgres and the owning host know it:
     * the gateway checks an execution's event batches against a key derived from it.
     */
    token: uuid("token"),
    startedAt: tstz("started_at").notNull().defaultNow(),
    finishedAt: tstz("finished_at"),
    outcome: text("outcome"),
  },
  (t) => [index("executions_job_idx").on(t.jobId)],
);

/**
 * Input sent to a running job (POST /v1/jobs/{id}/input). Durable first; the owner applies it at
 * the next model turn. status: requested → accepted (the owner took it) → applied (a model turn
 * included it); already_finished when the job reached a terminal state first (a trigger sets it,
 * so every path to a terminal state — finish, reap, cancel — settles pending inputs atomically).
 */
export const jobInputs = pgTable(
  "job_inputs",
  {
    id: uuid("id").primaryKey().defaultRandom(),
    jobId: uuid("job_id")
      .notNull()
      .references(() => jobs.id),
    tenantId: text("tenant_id").notNull(),
    /** Arrival order (global, so concurrent inputs never race for a per-job number). */
    seq: bigint("seq", { mode: "number" }).generatedAlwaysAsIdentity(),
    content: text("content").notNull(),
    idempotencyKey: text("idempotency_key"),
    /** SHA-256 hex of the input body: a reused idempotency key with another body is a 409. */
    requestHash: text("request_hash"),
    status: text("status").notNull().default("requested"),
    createdAt: tstz("created_at").notNull().defaultNow(),
    acceptedAt: tstz("accepted_at"),
    appliedAt: tstz("applied_at"),
    /** The execution that accepted it. */
    executionId: uuid("execution_id"),
  },
  (t) => [
    check("job_inputs_status_ck", sql`${t.status} in ${sqlList(INPUT_STATUSES)}`),
    index("job_inputs_job_seq_idx").on(t.jobId, t.seq),
    uniqueIndex("job_inputs_idempotency_uq").on(t.jobId, t.idempotencyKey).where(sql`${t.idempotencyKey} is not null`),
  ],
);

/**
 * One waitpoint of a job: a gated tool call (kind `approval`) or an ask_user call (kind `input`),
 * written by the suspending execution in its suspend statement, and the decision that ended it
 * (by the API or the deadline). Kept after the job resumes so a repeated decision is answered
 * with the one recorded (idempotent) and a different one is a 409.
 */
export const jobWaits = pgTable(
  "job_waits",
  {
    jobId: uuid("job_id")
      .notNull()
      .references(() => jobs.id),
    callId: text("call_id").notNull(),
    kind: text("kind").notNull(),
    tool: text("tool").notNull(),
    /** The execution that suspended here. */
    executionId: uuid("execution_id").notNull(),
    requestedAt: tstz("requested_at").notNull().defaultNow(),
    deadlineAt: tstz("deadline_at").notNull(),
    /** approve | deny | input | children (every child of the turn ended); null while undecided. */
    decision: text("decision"),
    note: text("note"),
    /** The job_inputs row that answered an ask_user call. */
    inputId: uuid("input_id"),
    /** api | deadline | children. */
    decidedBy: text("decided_by"),
    decidedAt: tstz("decided_at"),
  },
  (t) => [
    primaryKey({ columns: [t.jobId, t.callId] }),
    check("job_waits_kind_ck", sql`${t.kind} in ${sqlList(WAIT_KINDS)}`),
    check("job_waits_decision_ck", sql`${t.decision} in ${sqlList(WAIT_DECISIONS)}`),
  ],
);

/**
 * A job the retention purge deleted: its id and tenant, so a later request for it is 410 Gone
 * (the job existed and was deleted on purpose) rather than 404 (it never existed for this tenant).
 */
export const purgedJobs = pgTable("purged_jobs", {
  id: uuid("id").primaryKey(),
  tenantId: text("tenant_id").notNull(),
  purgedAt: tstz("purged_at").notNull().defaultNow(),
});

/**
 * A tenant's agent: its name and newest version number. Versions are immutable rows of
 * agent_versions; archiving stops new jobs from naming the agent, and leaves its versions.
 */
export const agents = pgTable(
  "agents",
  {
    tenantId: text("tenant_id")
      .notNull()
      .references(() => tenants.id),
    name: text("name").notNull(),
    latestVersion: integer("latest_version").notNull().default(1),
    createdAt: tstz("created_at").notNull().defaultNow(),
    archivedAt: tstz("archived_at"),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.name] })],
);

export const agentVersions = pgTable(
  "agent_versions",
  {
    tenantId: text("tenant_id").notNull(),
    name: text("name").notNull(),
    version: integer("version").notNull(),
    /** The AgentDefinition (src/contracts/agent.ts) with its defaults applied. */
    definition: jsonb("definition").$type<AgentDefinition>().notNull(),
    createdAt: tstz("created_at").notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.name, t.version] }),
    foreignKey({ columns: [t.tenantId, t.name], foreignColumns: [agents.tenantId, agents.name] }),
  ],
);

/**
 * One model call's tokens, written when the provider's usage arrives (or estimated at the end of
 * the call when it sends none), so a host dying mid-run loses none of what was reported. No
 * foreign key to jobs: usage outlives the retention purge of the job it was spent on.
 */
export const modelUsage = pgTable(
  "model_usage",
  {
    id: bigint("id", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    tenantId: text("tenant_id").notNull(),
    jobId: uuid("job_id").notNull(),
    executionId: uuid("execution_id").notNull(),
    /** The registry's public model name (what quota and GET /v1/usage group by). */
    model: text("model").notNull(),
    promptTokens: integer("prompt_tokens").notNull(),
    completionTokens: integer("completion_tokens").notNull(),
    estimated: boolean("estimated").notNull().default(false),
    createdAt: tstz("created_at").notNull().defaultNow(),
  },
  (t) => [
    // GET /v1/usage sums a tenant's calls by day and model over a date range.
    index("model_usage_tenant_created_idx").on(t.tenantId, t.createdAt),
  ],
);

export type JobRow = typeof jobs.$inferSelect;
