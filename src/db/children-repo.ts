/**
 * Sub-agents in Postgres: what a delegating run reads before it creates children (its place in
 * the tree and how many jobs the job and the tree already hold, for the delegation limits) and
 * what the execution that resumes reads (each child's end). The children themselves are
 * inserted by the parent's suspend statement (wait-repo.ts), and the parent is re-queued by the
 * trigger that fires when the turn's last child ends (drizzle/0011_subagents.sql).
 */
import { sql } from "drizzle-orm";
import type { JobError } from "../contracts/job";
import { type Db, resultRows } from "./client";

export interface TreePlace {
  /** The job's own depth (0: a submitted job). */
  depth: number;
  /** Children this job created so far, over all its turns. */
  children: number;
  /** Jobs below the root of the job's tree. */
  treeSize: number;
}

export async function treePlace(db: Db, jobId: string): Promise<TreePlace> {
  const rows = resultRows<{ depth: number; children: string | number; tree_size: string | number }>(
    await db.execute(sql`
      SELECT j.depth,
        (SELECT count(*) FROM jobs c WHERE c.parent_job_id = j.id) AS children,
        (SELECT count(*) FROM jobs d WHERE d.root_job_id = coalesce(j.root_job_id, j.id)) AS tree_size
      FROM jobs j WHERE j.id = ${jobId}`),
  );
  const r = rows[0];
  if (!r) throw new Error(`job ${jobId} vanished while it delegated`);
  return { depth: Number(r.depth), children: Number(r.children), treeSize: Number(r.tree_size) };
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
