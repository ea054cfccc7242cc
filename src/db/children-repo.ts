/**
 * Sub-agents in Postgres: what a delegating run reads before it creates children (its place in
 * the tree and how many jobs the job and the tree already hold, for the delegation limits) and
 * what the execution that resumes reads (each child's end). The children themselves are
 * inserted by the parent's suspend statement (wait-repo.ts), and the parent is re-queued by the
 * trigger that fires when the turn's last child ends (drizzle/0010_subagents.sql).
 */
import { sql } from "drizzle-orm";
import type { JobError } from "../contracts/job";
import type { TreeNode } from "../contracts/tree";
import { isUuid } from "../domain/uuid";
import { tenantQueuedSql } from "./admission-repo";
import { overBudgetSql } from "./budget-repo";
import { type Db, resultRows } from "./client";

export interface TreePlace {
  /** The job's own depth (0: a submitted job). */
  depth: number;
  /** Children this job created so far, over all its turns. */
  children: number;
  /** Jobs below the root of the job's tree. */
  treeSize: number;
  /** The tenant's jobs in `queued` now (`tenantQueuedSql`), for its queued-jobs limit. */
  tenantQueued: number;
  /** The tenant's daily budget is spent (budget-repo.ts): delegate calls create no child. */
  overBudget: boolean;
}

export async function treePlace(db: Db, jobId: string): Promise<TreePlace> {
  const rows = resultRows<{
    depth: number;
    children: string | number;
    tree_size: string | number;
    tenant_queued: string | number;
    over_budget: boolean;
  }>(
    await db.execute(sql`
      SELECT j.depth,
        (SELECT count(*) FROM jobs c WHERE c.parent_job_id = j.id) AS children,
        (SELECT count(*) FROM jobs d WHERE d.root_job_id = coalesce(j.root_job_id, j.id)) AS tree_size,
        ${tenantQueuedSql(sql`j.tenant_id`)} AS tenant_queued,
        ${overBudgetSql(sql`j.tenant_id`)} AS over_budget
      FROM jobs j WHERE j.id = ${jobId}`),
  );
  const r = rows[0];
  if (!r) throw new Error(`job ${jobId} vanished while it delegated`);
  return {
    depth: Number(r.depth),
    children: Number(r.children),
    treeSize: Number(r.tree_size),
    tenantQueued: Number(r.tenant_queued),
    overBudget: r.over_budget === true,
  };
}

export interface ChildEnd {
  id: string;
  callId: string;
  agentName: string | null;
  state: string;
  output: string | null;
  outputJson: unknown;
  error: JobError | null;
}

/** The children one execution of the parent created (one turn's delegate calls), as they ended. */
export async function childrenOf(db: Db, parentJobId: string, parentExecutionId: string): Promise<ChildEnd[]> {
  const rows = resultRows<{
    id: string;
    parent_call_id: string;
    agent_name: string | null;
    state: string;
    output: string | null;
    output_json: unknown;
    error: JobError | null;
  }>(
    await db.execute(sql`
      SELECT id, parent_call_id, agent_name, state, output, output_json, error FROM jobs
      WHERE parent_job_id = ${parentJobId} AND parent_execution_id = ${parentExecutionId}`),
  );
  return rows.map((r) => ({
    id: r.id,
    callId: r.parent_call_id,
    agentName: r.agent_name,
    state: r.state,
    output: r.output,
    outputJson: r.output_json,
    error: r.error,
  }));
}

/**
 * Whether `childId` is the tenant's job and a child of `parentId`: the tree stream's check before
 * it follows a job a `child.created` event names (a payload is a host's word, not a tenant check).
 */
export async function isChildOf(db: Db, tenantId: string, childId: string, parentId: string): Promise<boolean> {
  if (!isUuid(childId) || !isUuid(parentId)) return false;
  const rows = resultRows<{ ok: number }>(
    await db.execute(sql`
      SELECT 1 AS ok FROM jobs WHERE id = ${childId} AND tenant_id = ${tenantId} AND parent_job_id = ${parentId}`),
  );
  return rows.length > 0;
}

/**
 * A job and its descendants as a nested tree, tenant-scoped, in one recursive read (null when
 * the tenant has no such job). Children are ordered by creation; subtree usage is summed here.
 */
export async function getTree(db: Db, tenantId: string, requestedId: string): Promise<TreeNode | null> {
  if (!isUuid(requestedId)) return null;
  // Postgres answers ids in lower case and an upper-case UUID names the same job on every job
  // route, so the node asked for is found (and made the top) by the id as Postgres spells it.
  const jobId = requestedId.toLowerCase();
  const rows = resultRows<{
    id: string;
    agent_name: string | null;
    agent_version: number | null;
    state: TreeNode["state"];
    depth: number;
    parent_job_id: string | null;
    parent_call_id: string | null;
    created_at: string | Date;
    started_at: string | Date | null;
    finished_at: string | Date | null;
    prompt_tokens: string | number;
    completion_tokens: string | number;
    model_calls: number;
    cost_usd: string | number | null;
  }>(
    await db.execute(sql`
      WITH RECURSIVE tree AS (
        SELECT id FROM jobs WHERE id = ${jobId} AND tenant_id = ${tenantId}
        UNION ALL
        SELECT c.id FROM jobs c JOIN tree ON c.parent_job_id = tree.id
      )
      SELECT j.id, j.agent_name, j.agent_version, j.state, j.depth, j.parent_job_id, j.parent_call_id,
        j.created_at, j.started_at, j.finished_at, j.prompt_tokens, j.completion_tokens, j.model_calls,
        j.cost_usd
      FROM jobs j JOIN tree USING (id) ORDER BY j.depth, j.created_at, j.id`),
  );
  const iso = (v: string | Date | null) => (v === null ? null : new Date(v).toISOString());
  const nodes = new Map<string, TreeNode>();
  for (const r of rows) {
    const usage = {
      prompt_tokens: Number(r.prompt_tokens),
      completion_tokens: Number(r.completion_tokens),
      model_calls: Number(r.model_calls),
      cost_usd: r.cost_usd === null ? null : Number(r.cost_usd),
    };
    nodes.set(r.id, {
      id: r.id,
      agent: r.agent_name === null ? null : `${r.agent_name}@${r.agent_version}`,
      state: r.state,
      depth: r.depth,
      parent_job_id: r.id === jobId ? null : r.parent_job_id,
      parent_call_id: r.id === jobId ? null : r.parent_call_id,
      created_at: iso(r.created_at) as string,
      started_at: iso(r.started_at),
      finished_at: iso(r.finished_at),
      usage,
      subtree_usage: { ...usage },
      children: [],
    });
  }
  // Rows come by depth, so a parent is always placed before its children; sums go bottom-up.
  const ordered = [...nodes.values()];
  for (const n of ordered) if (n.parent_job_id) nodes.get(n.parent_job_id)?.children.push(n);
  for (const n of ordered.reverse()) {
    const parent = n.parent_job_id ? nodes.get(n.parent_job_id) : undefined;
    if (!parent) continue;
    parent.subtree_usage.prompt_tokens += n.subtree_usage.prompt_tokens;
    parent.subtree_usage.completion_tokens += n.subtree_usage.completion_tokens;
    parent.subtree_usage.model_calls += n.subtree_usage.model_calls;
    // Null only while no job of the subtree was priced: an unpriced child adds nothing, not 0.
    const childCost = n.subtree_usage.cost_usd;
    if (childCost !== null) parent.subtree_usage.cost_usd = (parent.subtree_usage.cost_usd ?? 0) + childCost;
  }
  return nodes.get(jobId) ?? null;
}
