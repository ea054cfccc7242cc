/**
 * The read a running execution makes of its own job row (the writes are fenced and live in
 * ownership-repo.ts): what to run. Its phase histograms' timing facts come back from the
 * terminal write itself.
 */
import { and, eq, sql } from "drizzle-orm";
import type { AgentDefinition } from "../contracts/agent";
import type { ChatMessage } from "../contracts/job";
import type { ExecutionIdentity } from "../domain/identity";
import type { ModelPricing } from "../domain/models";
import { overBudgetSql } from "./budget-repo";
import { type Db, resultRows } from "./client";
import { agentVersions, FINAL_STATES_SQL, jobs } from "./schema";

/** What an execution runs: the conversation, the model it asked for, the tools it allows, its agent. */
export interface RunnableJob {
  messages: ChatMessage[];
  model: string | null;
  /** Sandbox tools, and an agent's code tools. */
  tools: string[];
  tenantId: string;
  /** The conversation the job belongs to (chat messages, `conversation_id` on submit), or null. */
  conversationId: string | null;
  /**
   * The agent version the job was submitted with (resolved at submit, so later versions never
   * reach it), or null for the built-in default agent. Read once, when the run starts.
   */
  agent: { name: string; version: number; definition: AgentDefinition } | null;
  /** Where the last execution suspended (the host's RunCheckpoint), or null for a first run. */
  checkpoint: Record<string, unknown> | null;
  /**
   * Why this execution continues the job from its journal (`host_lost`, `host_shutdown`: the
   * reaper or a hand-off re-queued it, src/db/reaper-repo.ts), or null: not a recovery.
   */
  recoveryReason: string | null;
  /** The job this one was forked from (null: no fork); its first execution has `recoveryReason` "forked". */
  forkedFromJobId: string | null;
  /** The source's step the fork continued after (null: no fork): calls journaled up to it are the source's. */
  forkedFromStep: number | null;
  /** The W3C traceparent the run's spans are children of (the delegating call's, or a trusted client's); null: none. */
  traceparent: string | null;
  /** The client's traceparent kept as a link only (the default; clientTraceContext); null: none. */
  clientTraceparent: string | null;
  /** The tenant's daily budget was spent when the run started (budget-repo.ts; read in the same statement). */
  budgetSpent: boolean;
  /**
   * The tenant's daily budget and the day's spend in the ledger when the run started (Postgres's
   * UTC day, `YYYY-MM-DD`), or null: no budget. The run reserves each call against it in Redis
   * (docs/quota.md, "Budgets: reserve, then settle"); the spend is the floor of that counter.
   */
  dailyBudget: { budgetUsd: number; spentUsd: number; day: string } | null;
  /**
   * The tree's budgets: the root job's `limits` (its own, each at most its agent's, else the
   * agent's; max_cost_usd raised by approved `budget.exhausted` waits) and what the tree's jobs
   * had spent when the run started (the Redis counters' floors), or null: no limit.
   */
  treeBudget: {
    rootJobId: string;
    maxCostUsd: number | null;
    maxTokens: number | null;
    onBudget: "fail" | "ask";
    spentUsd: number;
    spentTokens: number;
  } | null;
}

/**
 * The job a started execution runs, with its pinned agent version in the same statement. Throws
 * if the row is gone (it cannot be, once started) or names a version that does not exist
 * (versions are never deleted, so that is a broken row, not a race).
 */
export async function loadRunnableJob(db: Db, jobId: string): Promise<RunnableJob> {
  const rows = await db
    .select({
      input: jobs.input,
      model: jobs.model,
      tools: jobs.tools,
      tenantId: jobs.tenantId,
      conversationId: jobs.conversationId,
      agentName: jobs.agentName,
      agentVersion: jobs.agentVersion,
      definition: agentVersions.definition,
      checkpoint: jobs.checkpoint,
      recoveryReason: jobs.recoveryReason,
      forkedFromJobId: jobs.forkedFromJobId,
      forkedFromStep: jobs.forkedFromStep,
      traceparent: jobs.traceparent,
      clientTraceparent: jobs.clientTraceparent,
      budgetSpent: sql<boolean>`${overBudgetSql(sql`${jobs.tenantId}`)}`,
      dailyBudget: sql<{ budget_usd: number | string; spent_usd: number | string; day: string } | null>`(
        SELECT json_build_object('budget_usd', bt.daily_budget_usd, 'spent_usd', coalesce(bs.cost_usd, 0),
          'day', to_char((now() AT TIME ZONE 'UTC')::date, 'YYYY-MM-DD'))
        FROM tenants bt
        LEFT JOIN tenant_daily_spend bs ON bs.tenant_id = bt.id AND bs.day = (now() AT TIME ZONE 'UTC')::date
        WHERE bt.id = ${jobs.tenantId} AND bt.daily_budget_usd IS NOT NULL)`,
      // The root job's own limits narrow its agent's (least() skips a null); approvals of budget
      // waits add to the cost limit (budget_added_usd, on the root). Null when neither is set.
      treeBudget: sql<{
        root: string;
        max_cost_usd: number | string | null;
        max_tokens: number | string | null;
        on_budget: "fail" | "ask";
        spent_usd: number | string;
        spent_tokens: number | string;
      } | null>`(
        SELECT json_build_object('root', t.id, 'max_cost_usd', t.max_cost_usd + t.added, 'max_tokens', t.max_tokens,
          'on_budget', t.on_budget, 'spent_usd', s.spent_usd, 'spent_tokens', s.spent_tokens)
        FROM (
          SELECT r.id, r.budget_added_usd AS added,
            least((r.limits->>'max_cost_usd')::numeric, (av.definition->'limits'->>'max_cost_usd')::numeric) AS max_cost_usd,
            least((r.limits->>'max_tokens')::bigint, (av.definition->'limits'->>'max_tokens')::bigint) AS max_tokens,
            coalesce(r.limits->>'on_budget', av.definition->'limits'->>'on_budget', 'fail') AS on_budget
          FROM jobs r
          LEFT JOIN agent_versions av ON av.tenant_id = r.tenant_id AND av.name = r.agent_name AND av.version = r.agent_version
          WHERE r.id = coalesce(${jobs.rootJobId}, ${jobs.id})
        ) t,
        LATERAL (SELECT coalesce(sum(tj.cost_usd), 0) AS spent_usd,
            coalesce(sum(tj.prompt_tokens + tj.completion_tokens), 0) AS spent_tokens
          FROM jobs tj WHERE tj.id = t.id OR tj.root_job_id = t.id) s
        WHERE t.max_cost_usd IS NOT NULL OR t.max_tokens IS NOT NULL)`,
    })
    .from(jobs)
    .leftJoin(
      agentVersions,
      and(
        eq(agentVersions.tenantId, jobs.tenantId),
        eq(agentVersions.name, jobs.agentName),
        eq(agentVersions.version, jobs.agentVersion),
      ),
    )
    .where(eq(jobs.id, jobId))
    .limit(1);
  const row = rows[0];
  if (!row) throw new Error(`job ${jobId} vanished after it was started`);
  let agent: RunnableJob["agent"] = null;
  if (row.agentName !== null) {
    if (row.agentVersion === null || row.definition === null) {
      throw new Error(`job ${jobId} names agent ${row.agentName}@${row.agentVersion}, which does not exist`);
    }
    agent = { name: row.agentName, version: row.agentVersion, definition: row.definition };
  }
  return {
    messages: row.input.messages,
    model: row.model,
    tools: row.tools,
    tenantId: row.tenantId,
    conversationId: row.conversationId ?? null,
    agent,
    checkpoint: row.checkpoint ?? null,
    recoveryReason: row.recoveryReason ?? null,
    forkedFromJobId: row.forkedFromJobId ?? null,
    forkedFromStep: row.forkedFromStep ?? null,
    traceparent: row.traceparent,
    clientTraceparent: row.clientTraceparent,
    budgetSpent: row.budgetSpent === true,
    dailyBudget: row.dailyBudget
      ? {
          budgetUsd: Number(row.dailyBudget.budget_usd),
          spentUsd: Number(row.dailyBudget.spent_usd),
          day: row.dailyBudget.day,
        }
      : null,
    treeBudget: row.treeBudget
      ? {
          rootJobId: row.treeBudget.root,
          maxCostUsd: row.treeBudget.max_cost_usd === null ? null : Number(row.treeBudget.max_cost_usd),
          maxTokens: row.treeBudget.max_tokens === null ? null : Number(row.treeBudget.max_tokens),
          onBudget: row.treeBudget.on_budget === "ask" ? "ask" : "fail",
          spentUsd: Number(row.treeBudget.spent_usd),
          spentTokens: Number(row.treeBudget.spent_tokens),
        }
      : null,
  };
}

/** One model call's tokens, as recorded. */
export interface CallUsage {
  tenantId: string;
  /** The registry's public model name. */
  model: string;
  promptTokens: number;
  completionTokens: number;
  /** The provider reported none: these are the host's estimate. */
  estimated: boolean;
  /** The host's registry prices for the model; absent: the call has no cost (null, not 0). */
  pricing?: ModelPricing;
  /** What the call reserved against its cost budgets before it was made, in US dollars (0: none). */
  reservedUsd?: number;
}

/**
 * The call's cost in US dollars, computed by Postgres in numeric (exact: tokens × price per
 * million, no binary rounding before the sums), or NULL for a model without a price.
 */
function callCostSql(usage: CallUsage) {
  const p = usage.pricing;
  if (!p) return sql`NULL::numeric`;
  return sql`(${usage.promptTokens}::numeric * ${String(p.inputUsdPerMtok)}::numeric
    + ${usage.completionTokens}::numeric * ${String(p.outputUsdPerMtok)}::numeric) / 1000000`;
}

/**
 * Record one model call's usage: its model_usage row (with its cost), the job's running sums and
 * the tenant's spend of the UTC day (what budgets check), in one statement, as soon as the call
 * ends (a host dying later loses none of it).
 *
 * The ledger row is deliberately NOT fenced by the execution identity, unlike every other write
 * a run makes: the fence protects the job's state from a run that no longer owns it, but tokens
 * are a cost fact of the provider's — they were spent (and billed) whether or not this execution
 * still owns the job, so dropping them when a heartbeat raced a lost claim would under-count what
 * the tenant used (GET /v1/usage reads the ledger). The job's sums move only while the job is not
 * final: a final row is never written again (the chaos checker counts any later write as a stale
 * one), so a call a stale owner finished after its job was called lost is in the ledger only.
 * The day's spend is the ledger's, so it moves either way.
 *
 * Returns whether the tenant's daily budget is spent after this call (its new day sum, or the
 * row as it was for an unpriced call), so the run's next turn needs no read of its own.
 */
export async function recordModelUsage(db: Db, id: ExecutionIdentity, usage: CallUsage): Promise<boolean> {
  const rows = resultRows<{ over_budget: boolean }>(
    await db.execute(sql`
    WITH used AS (
      INSERT INTO model_usage (tenant_id, job_id, execution_id, model, prompt_tokens, completion_tokens, estimated, cost_usd)
      VALUES (${usage.tenantId}, ${id.jobId}, ${id.executionId}, ${usage.model}, ${usage.promptTokens},
        ${usage.completionTokens}, ${usage.estimated}, ${callCostSql(usage)})
      RETURNING tenant_id, job_id, prompt_tokens, completion_tokens, estimated, cost_usd, created_at
    ),
    spent AS (
      INSERT INTO tenant_daily_spend (tenant_id, day, cost_usd)
      SELECT tenant_id, (created_at AT TIME ZONE 'UTC')::date, cost_usd FROM used WHERE cost_usd IS NOT NULL
      ON CONFLICT (tenant_id, day) DO UPDATE SET cost_usd = tenant_daily_spend.cost_usd + excluded.cost_usd
      RETURNING cost_usd
    ),
    summed AS (
      UPDATE jobs SET prompt_tokens = jobs.prompt_tokens + used.prompt_tokens,
        completion_tokens = jobs.completion_tokens + used.completion_tokens,
        model_calls = jobs.model_calls + 1,
        usage_estimated = jobs.usage_estimated OR used.estimated,
        reserved_usd = jobs.reserved_usd + ${usage.reservedUsd ?? 0}::numeric,
        cost_usd = CASE WHEN used.cost_usd IS NULL THEN jobs.cost_usd ELSE coalesce(jobs.cost_usd, 0) + used.cost_usd END
      FROM used WHERE jobs.id = used.job_id AND jobs.state NOT IN ${FINAL_STATES_SQL}
      RETURNING 1
    )
    SELECT EXISTS (
      SELECT 1 FROM tenants t WHERE t.id = ${usage.tenantId} AND t.daily_budget_usd IS NOT NULL
        AND coalesce(
          (SELECT cost_usd FROM spent),
          (SELECT s.cost_usd FROM tenant_daily_spend s WHERE s.tenant_id = t.id AND s.day = (now() AT TIME ZONE 'UTC')::date),
          0) >= t.daily_budget_usd
    ) AS over_budget`),
  );
  return rows[0]?.over_budget === true;
}
