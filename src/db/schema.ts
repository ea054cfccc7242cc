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
  date,
  doublePrecision,
  foreignKey,
  index,
  integer,
  jsonb,
  numeric,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from "drizzle-orm/pg-core";
import { ADMISSION_LIMITS } from "../contracts/admission";
import type { AgentDefinition, JobLimits } from "../contracts/agent";
import { type ChatMessage, INPUT_STATUSES, JOB_STATES, type JobError } from "../contracts/job";
import { FINAL_STATES } from "../contracts/job-state";
import { WAIT_DECISIONS, WAIT_KINDS, type WaitingFor } from "../contracts/wait";

/** What a journal row records (src/db/journal-repo.ts has each kind's payload). */
export const JOURNAL_KINDS = ["turn", "call", "result", "user", "recovered", "snapshot"] as const;

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
    /** US dollars the tenant may spend per UTC day (tenant_daily_spend); null: no budget. */
    dailyBudgetUsd: numeric("daily_budget_usd", { mode: "number" }),
    // What the tenant's agents take, for the caps of docs/limits.md ("Agents and versions"):
    // every agent it ever created (archived ones too: nothing is deleted) and the bytes of every
    // stored version's definition (its jsonb text). Moved only by the statements that insert an
    // agent or a version (src/db/agents-repo.ts), which read them from this row once they hold
    // its lock, so concurrent creates cannot both take the last slot.
    agentCount: integer("agent_count").notNull().default(0),
    agentBytes: bigint("agent_bytes", { mode: "number" }).notNull().default(0),
  },
  (t) => [
    check("tenants_weight_ck", sql`${t.weight} >= 1`),
    check("tenants_max_running_ck", sql`${t.maxRunning} >= 0`),
  ],
);

/**
 * What each tenant's priced model calls cost per UTC day: the running sum the budget checks read
 * (one primary-key row, where summing model_usage would read every call of the day). Moved by
 * the same statement that writes the call's model_usage row (recordModelUsage).
 */
export const tenantDailySpend = pgTable(
  "tenant_daily_spend",
  {
    tenantId: text("tenant_id").notNull(),
    /** The UTC day. */
    day: date("day", { mode: "string" }).notNull(),
    costUsd: numeric("cost_usd", { mode: "number" }).notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.day] })],
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
    tools: jsonb("tools").$type<string[]>().notNull().default([]),
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
    /** US dollars of the priced calls (numeric: sums stay exact); null while none was priced. */
    costUsd: numeric("cost_usd", { mode: "number" }),
    /**
     * US dollars its calls reserved before they were made (each call's worst case against its
     * cost budgets, summed with its usage; docs/quota.md): what the bound held against cost_usd.
     */
    reservedUsd: numeric("reserved_usd", { mode: "number" }).notNull().default(0),
    /** The job's own `limits` as submitted (each at most its agent's); null: the agent's apply. */
    limits: jsonb("limits").$type<JobLimits>(),
    /**
     * US dollars added to the tree's max_cost_usd by approvals of `budget.exhausted` waits
     * (`add_usd`), on the root job (the tree's budget is the root's). Not indexed: HOT.
     */
    budgetAddedUsd: numeric("budget_added_usd", { mode: "number" }).notNull().default(0),
    /**
     * The W3C traceparent the run's spans are children of (sandbox-host/tracing/): the delegating
     * call's for a child job, the client's only when the operator trusts clients' trace context
     * (OTEL_TRUST_CLIENT_SAMPLING). Null: a trace of its own, named after the job.
     */
    traceparent: text("traceparent"),
    /**
     * The client's W3C traceparent when the operator does not trust clients' trace context (the
     * default): the run's execution span links to it instead of being its child
     * (`clientTraceContext`, src/domain/traceparent.ts); null: none sent, or kept as `traceparent`.
     */
    clientTraceparent: text("client_traceparent"),
    // What the job's inputs (job_inputs) take of LIMITS.maxInputsPerJob / maxInputBytesPerJob,
    // kept on the row submitInput locks so that the check and the count move together (counting
    // job_inputs read the statement's snapshot: a burst overshot the caps). Not indexed: HOT.
    inputCount: integer("input_count").notNull().default(0),
    inputBytes: bigint("input_bytes", { mode: "number" }).notNull().default(0),
    // The waitpoint (state `waiting`): what the job waits for (the public view shows it), when the
    // wait ends by itself, and the checkpoint the next execution resumes from. The checkpoint is
    // the host's (RunCheckpoint, sandbox-host/runner/waitpoint.ts), a view of job_journal: the
    // call that waits, its turn, a children wait's children; the conversation is the journal's.
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
    // Recovery (docs/architecture.md, "Recovery"): how many times the reaper re-queued the job
    // for a new execution after its owner was lost or handed it off, and why the next execution
    // starts from the journal (cleared by that execution's first write; null: a fresh start).
    recoveries: integer("recoveries").notNull().default(0),
    recoveryReason: text("recovery_reason"),
    // A fork (POST /v1/jobs/{id}/fork, docs/architecture.md "Forks"): the job and journal step it
    // was forked from. No foreign key: the source may be purged by retention before the fork ends,
    // and the fork does not need it (its journal holds its own copy of the prefix).
    forkedFromJobId: uuid("forked_from_job_id"),
    forkedFromStep: integer("forked_from_step"),
    /** The replay (POST /v1/replays) that made this job as a rerun of `forked_from_job_id`; null: none. */
    replayId: uuid("replay_id"),
    // The schedule tick that made the job (null: a submitted job). Unique together: the one
    // thing that makes a tick fire once however many hosts and cron invocations race for it.
    scheduleId: uuid("schedule_id"),
    scheduledFor: tstz("scheduled_for"),
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
    // The idle look (reaper-repo.ts fleetWork): a run over with its sandbox not yet removed is work
    // for a janitor, so no host sleeps through it. Rare rows: a tiny index.
    index("jobs_cleanup_pending_idx").on(t.id).where(sql`${t.cleanupPending}`),
    check(
      "jobs_priority_ck",
      sql`${t.priority} between ${sql.raw(String(ADMISSION_LIMITS.minPriority))} and ${sql.raw(String(ADMISSION_LIMITS.maxPriority))}`,
    ),
    // Candidate selection when the ready index is unavailable, and index rebuilds.
    index("jobs_ready_idx").on(t.createdAt).where(sql`${t.state} = 'queued' and ${t.owner} is null`),
    // A running job always has its owner (only the started CAS sets `running`, under the owner's
    // claim; every statement that clears the owner also leaves `running`). So the running jobs are
    // a part of the held ones, and the reaper and the idle look find them through jobs_held_idx
    // with `owner IS NOT NULL` stated: an index of its own took an entry from every start (a
    // non-HOT update), 1 of the ~12.5 index entries a lifecycle wrote (docs/claims.md).
    check("jobs_running_owner_ck", sql`${t.state} <> 'running' OR ${t.owner} IS NOT NULL`),
    // No index of `state = 'queued'` alone: the queued-jobs limit counts the unclaimed by
    // jobs_admission_idx and the claimed by jobs_held_idx (tenantQueuedSql, admission-repo.ts).
    // Such an index took an entry from every claim, for a count made at submit (docs/claims.md).
    // Hosts' reapers and the cron backstop end waits past their deadline.
    index("jobs_waiting_deadline_idx").on(t.waitDeadlineAt).where(sql`${t.state} = 'waiting'`),
    // A parent's children (its resume trigger, drizzle/0010) and a root's tree (cancel, GET …/tree).
    index("jobs_parent_idx").on(t.parentJobId).where(sql`${t.parentJobId} is not null`),
    index("jobs_root_idx").on(t.rootJobId).where(sql`${t.rootJobId} is not null`),
    // A replay's jobs (GET /v1/replays/{id}); only replayed jobs are in it.
    index("jobs_replay_idx").on(t.replayId).where(sql`${t.replayId} is not null`),
    // The retention purge (retention-repo.ts) takes the oldest finished jobs first; without it
    // each batch would scan every job.
    index("jobs_finished_idx")
      .on(t.finishedAt)
      .where(sql`${t.state} in ${sqlList(FINAL_STATES)}`),
    // One job per schedule tick (src/db/schedules-repo.ts fires with ON CONFLICT DO NOTHING), and
    // GET /v1/jobs?schedule_id=… reads a schedule's jobs by it.
    uniqueIndex("jobs_schedule_tick_uq").on(t.scheduleId, t.scheduledFor).where(sql`${t.scheduleId} is not null`),
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
    /**
     * The seq of the last event this execution had emitted when its host wrote the terminal state
     * (the terminal event itself comes next). The projector reads it to tell a host whose outbox is
     * still delivering (the job's log is behind it: wait) from one that died with only its
     * terminal event undelivered (project it). Null when the terminal write did not come from the
     * execution's host.
     */
    eventsThrough: integer("events_through"),
  },
  (t) => [index("executions_job_idx").on(t.jobId)],
);

/**
 * A job's journal: one row per completed step of its runs (an assistant turn with its tool calls,
 * a tool call about to be made, a tool result, a user message the loop added, a recovery), in
 * `seq` order across every execution of the job. Append-only, and every append is fenced by the
 * appending execution's identity (src/db/journal-repo.ts): a new execution rebuilds the
 * conversation from it and never from what a stale owner wrote after losing the job.
 */
export const jobJournal = pgTable(
  "job_journal",
  {
    jobId: uuid("job_id")
      .notNull()
      .references(() => jobs.id),
    seq: integer("seq").notNull(),
    /** The epoch of the execution that appended the row. */
    epoch: integer("epoch").notNull(),
    kind: text("kind").notNull(),
    payload: jsonb("payload").$type<Record<string, unknown>>().notNull(),
    createdAt: tstz("created_at").notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.jobId, t.seq] }),
    check("job_journal_kind_ck", sql`${t.kind} in ${sqlList(JOURNAL_KINDS)}`),
    // The blob collection's "does a snapshot still name this blob" (artifacts-repo.ts).
    index("job_journal_snapshot_idx").on(sql`(${t.payload}->>'sha256')`).where(sql`${t.kind} = 'snapshot'`),
  ],
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
    /** Kind `budget`, decision approve: the US dollars it added to the tree's limit. */
    addUsd: numeric("add_usd", { mode: "number" }),
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
    /** The call's cost at the host's registry prices when it was made; null: the model has no price. */
    costUsd: numeric("cost_usd", { mode: "number" }),
    createdAt: tstz("created_at").notNull().defaultNow(),
  },
  (t) => [
    // GET /v1/usage sums a tenant's calls by day and model over a date range.
    index("model_usage_tenant_created_idx").on(t.tenantId, t.createdAt),
  ],
);

/**
 * The code tools each host offers (HOST_TOOLS), published by the host at start and removed at
 * its graceful stop: GET /v1/tools lists them, and an agent may name only a tool some host (or
 * the built-ins) has. Per host, because hosts of one fleet may run different tool modules (a
 * rollout); a job whose claiming host lacks a tool gets the tool error tool_unavailable.
 */
export const codeTools = pgTable(
  "code_tools",
  {
    hostId: text("host_id").notNull(),
    name: text("name").notNull(),
    description: text("description").notNull(),
    inputSchema: jsonb("input_schema").$type<Record<string, unknown>>().notNull(),
    idempotent: boolean("idempotent").notNull(),
    requiresApproval: boolean("requires_approval").notNull(),
    timeoutMs: integer("timeout_ms").notNull(),
    publishedAt: tstz("published_at").notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.hostId, t.name] }), index("code_tools_name_idx").on(t.name)],
);

/**
 * A tenant's cron schedule (docs/api.md "Schedules"): each tick makes one job (jobs.schedule_id,
 * jobs.scheduled_for). `next_run_at` is the tick owed next; whoever fires it (any host's
 * scheduler, the Worker's cron) inserts the job and moves it on, src/db/schedules-repo.ts.
 */
/**
 * A bulk replay (POST /v1/replays): which of the tenant's jobs it selected and the agent it
 * reruns them with (null: each job's own version). Its jobs carry `jobs.replay_id`; its progress
 * is theirs. Not purged with them: a row per replay, a few hundred bytes.
 */
export const replays = pgTable("replays", {
  id: uuid("id").primaryKey(),
  tenantId: text("tenant_id")
    .notNull()
    .references(() => tenants.id),
  filter: jsonb("filter").$type<Record<string, unknown>>().notNull(),
  agent: text("agent"),
  jobsTotal: integer("jobs_total").notNull(),
  createdAt: tstz("created_at").notNull().defaultNow(),
});

/**
 * An eval (POST /v1/evals): the agent version its cases run with and the scorers each case's
 * answer gets. Its cases are `eval_cases`; its summary is computed from them and their jobs.
 */
export const evals = pgTable(
  "evals",
  {
    id: uuid("id").primaryKey(),
    tenantId: text("tenant_id")
      .notNull()
      .references(() => tenants.id),
    /** The agent as the request named it. */
    agent: text("agent").notNull(),
    agentName: text("agent_name").notNull(),
    agentVersion: integer("agent_version").notNull(),
    scorers: jsonb("scorers").$type<Array<Record<string, unknown>>>().notNull(),
    /** A replay id (string) or a replay filter the cases were taken from; null: the request's cases. */
    replayOf: jsonb("replay_of").$type<string | Record<string, unknown>>(),
    casesTotal: integer("cases_total").notNull(),
    createdAt: tstz("created_at").notNull().defaultNow(),
  },
  (t) => [index("evals_tenant_created_idx").on(t.tenantId, t.createdAt.desc(), t.id.desc())],
);

/**
 * One case of an eval: its input, what it expects, the job that ran it and, once that job ended
 * and a host scored it (sandbox-host/evals/eval-scorer.ts), its scores. `scored_at IS NULL` is the
 * scorers' work list (eval_cases_pending_idx); `judge_jobs` names the judge job of each judge
 * scorer once made (scorer name → job id), so a pass after a crash finds them again.
 */
export const evalCases = pgTable(
  "eval_cases",
  {
    evalId: uuid("eval_id")
      .notNull()
      .references(() => evals.id, { onDelete: "cascade" }),
    idx: integer("idx").notNull(),
    tenantId: text("tenant_id").notNull(),
    input: jsonb("input").$type<{ messages: ChatMessage[] }>().notNull(),
    expect: text("expect"),
    sourceJobId: uuid("source_job_id"),
    /** No foreign key: the retention purge may delete the job first (the case keeps its scores). */
    jobId: uuid("job_id").notNull(),
    judgeJobs: jsonb("judge_jobs").$type<Record<string, string>>(),
    scores: jsonb("scores").$type<Array<Record<string, unknown>>>(),
    /** The mean of the scores that scored, and whether every one of them passed (set with scored_at). */
    score: doublePrecision("score"),
    pass: boolean("pass"),
    scoredAt: tstz("scored_at"),
  },
  (t) => [
    primaryKey({ columns: [t.evalId, t.idx] }),
    index("eval_cases_pending_idx").on(t.jobId).where(sql`${t.scoredAt} is null`),
  ],
);

export const schedules = pgTable(
  "schedules",
  {
    id: uuid("id").primaryKey(),
    tenantId: text("tenant_id")
      .notNull()
      .references(() => tenants.id),
    cron: text("cron").notNull(),
    timezone: text("timezone").notNull().default("UTC"),
    /** An agent reference (`name` or `name@N`), resolved at each tick; null: the default agent. */
    agent: text("agent"),
    input: jsonb("input").$type<{ messages: ChatMessage[] }>().notNull(),
    metadata: jsonb("metadata").$type<Record<string, unknown>>().notNull().default({}),
    enabled: boolean("enabled").notNull().default(true),
    catchUp: text("catch_up").notNull().default("latest"),
    /** The tick owed next. Null while disabled. */
    nextRunAt: tstz("next_run_at"),
    lastRunAt: tstz("last_run_at"),
    /**
     * Set when a tick failed to fire: not tried again before this (a growing delay,
     * src/domain/schedule-time.ts `retryDelayMs`). Null once a tick fires, or the timing changes.
     */
    retryAt: tstz("retry_at"),
    /** Failures to fire in a row (the delay's exponent); 0 once a tick fires. */
    failures: integer("failures").notNull().default(0),
    /** Why the last try to fire failed, shown on the schedule; null once a tick fires. */
    lastError: text("last_error"),
    createdAt: tstz("created_at").notNull().defaultNow(),
    updatedAt: tstz("updated_at").notNull().defaultNow(),
  },
  (t) => [
    check("schedules_catch_up_ck", sql`${t.catchUp} in ('latest','none')`),
    index("schedules_tenant_created_idx").on(t.tenantId, t.createdAt, t.id),
    // The schedulers' one read: the enabled schedules that are due, their tick come and any retry
    // delay over (greatest() skips a null retry_at).
    index("schedules_due_idx").on(sql`greatest(${t.nextRunAt}, ${t.retryAt})`).where(sql`${t.enabled}`),
  ],
);

/**
 * A tenant's webhook endpoint (docs/api.md "Webhooks"). `secret` (whsec_ + base64 of 24 random
 * bytes) is what deliveries are signed with, so it is stored as it is; the API shows it once.
 */
export const webhooks = pgTable(
  "webhooks",
  {
    id: uuid("id").primaryKey(),
    tenantId: text("tenant_id")
      .notNull()
      .references(() => tenants.id),
    url: text("url").notNull(),
    events: jsonb("events").$type<string[]>().notNull(),
    secret: text("secret").notNull(),
    enabled: boolean("enabled").notNull().default(true),
    createdAt: tstz("created_at").notNull().defaultNow(),
    /** Attempts in a row that failed (any endpoint error, timeout or refusal); a success resets it. */
    consecutiveFailures: integer("consecutive_failures").notNull().default(0),
    /** No attempt is claimed for the endpoint before this (WEBHOOK_LIMITS.pauseAfterFailures). */
    pausedUntil: tstz("paused_until"),
    /** Why it was paused, shown on its API view. */
    pauseReason: text("pause_reason"),
    /** The last pause's length: the next one doubles it (up to WEBHOOK_LIMITS.pauseMaxMs); 0 after a success. */
    pauseMs: integer("pause_ms").notNull().default(0),
    /** Deliveries the outbox trigger recorded `dropped` for it: its tenant was at its pending cap. */
    droppedDeliveries: bigint("dropped_deliveries", { mode: "number" }).notNull().default(0),
  },
  (t) => [
    index("webhooks_tenant_idx").on(t.tenantId, t.createdAt, t.id),
    // The senders' "when does the next pause end" read.
    index("webhooks_paused_idx").on(t.pausedUntil).where(sql`${t.pausedUntil} is not null`),
  ],
);

/**
 * The webhook outbox: one row per (endpoint, job event) owed, inserted by the trigger
 * jobs_webhook_outbox (drizzle/0016) inside whichever statement changes the job's state, so no
 * crash falls between the two and a new terminal statement needs nothing. Its id is the
 * delivery's `webhook-id`, the same on every attempt.
 */
export const webhookDeliveries = pgTable(
  "webhook_deliveries",
  {
    id: uuid("id").primaryKey().defaultRandom(),
    webhookId: uuid("webhook_id")
      .notNull()
      .references(() => webhooks.id, { onDelete: "cascade" }),
    tenantId: text("tenant_id").notNull(),
    jobId: uuid("job_id").notNull(),
    eventType: text("event_type").notNull(),
    /** pending → delivered | failed; or dropped at once (its tenant had WEBHOOK_LIMITS.maxPendingPerTenant pending). */
    state: text("state").notNull().default("pending"),
    attempts: integer("attempts").notNull().default(0),
    /** When the next attempt is due; while one is in flight, when its lease ends. */
    nextAttemptAt: tstz("next_attempt_at").notNull().defaultNow(),
    /**
     * The body, built at the first attempt and sent byte for byte on every later one (text, not
     * jsonb: jsonb reorders keys, and a retry must carry the body its signature was made for).
     */
    payload: text("payload"),
    createdAt: tstz("created_at").notNull().defaultNow(),
    finishedAt: tstz("finished_at"),
  },
  (t) => [
    check("webhook_deliveries_state_ck", sql`${t.state} in ('pending','delivered','failed','dropped')`),
    // The outbox trigger's count of a tenant's pending deliveries (bounded by the cap).
    index("webhook_deliveries_tenant_pending_idx").on(t.tenantId).where(sql`${t.state} = 'pending'`),
    // The senders' reads: which endpoints have deliveries due, then each endpoint's oldest due.
    index("webhook_deliveries_due_idx").on(t.nextAttemptAt).where(sql`${t.state} = 'pending'`),
    index("webhook_deliveries_endpoint_due_idx").on(t.webhookId, t.nextAttemptAt).where(sql`${t.state} = 'pending'`),
    index("webhook_deliveries_webhook_idx").on(t.webhookId, t.createdAt),
    // The retention purge deletes a purged job's deliveries by it.
    index("webhook_deliveries_job_idx").on(t.jobId),
  ],
);

/** One attempt of a delivery: when, what came back (or the error), how long it took. */
export const webhookAttempts = pgTable(
  "webhook_attempts",
  {
    id: bigint("id", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    deliveryId: uuid("delivery_id")
      .notNull()
      .references(() => webhookDeliveries.id, { onDelete: "cascade" }),
    attemptedAt: tstz("attempted_at").notNull().defaultNow(),
    statusCode: integer("status_code"),
    error: text("error"),
    durationMs: integer("duration_ms").notNull(),
  },
  (t) => [index("webhook_attempts_delivery_idx").on(t.deliveryId, t.attemptedAt)],
);

export type JobRow = typeof jobs.$inferSelect;
export type ScheduleRow = typeof schedules.$inferSelect;

/**
 * A blob in the R2 bucket (workers/env.ts BLOBS), content-addressed per tenant: the object key is
 * `t/<tenant>/<sha256>` (src/domain/blobs.ts). Per tenant rather than shared, so a tenant's usage
 * is the sum of its own rows (the storage cap) and no tenant can learn from a dedupe hit that
 * another holds the same bytes. A row is written before the object (the host reserves it, then
 * uploads), and the Worker's cron collects rows no artifact references any more, object first.
 */
export const blobs = pgTable(
  "blobs",
  {
    tenantId: text("tenant_id").notNull(),
    sha256: text("sha256").notNull(),
    bytes: bigint("bytes", { mode: "number" }).notNull(),
    /** Refreshed whenever a new reference is about to be made, so collection spares it a while. */
    touchedAt: tstz("touched_at").notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.sha256] }), index("blobs_touched_idx").on(t.touchedAt)],
);

/** A job's artifact: a file its run left under /workspace/out/ (path relative to it). */
export const jobArtifacts = pgTable(
  "job_artifacts",
  {
    jobId: uuid("job_id")
      .notNull()
      .references(() => jobs.id),
    tenantId: text("tenant_id").notNull(),
    path: text("path").notNull(),
    bytes: bigint("bytes", { mode: "number" }).notNull(),
    sha256: text("sha256").notNull(),
    contentType: text("content_type").notNull(),
    /** The execution that recorded it. */
    executionId: uuid("execution_id").notNull(),
    createdAt: tstz("created_at").notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.jobId, t.path] }),
    foreignKey({ columns: [t.tenantId, t.sha256], foreignColumns: [blobs.tenantId, blobs.sha256] }),
    index("job_artifacts_blob_idx").on(t.tenantId, t.sha256),
  ],
);
