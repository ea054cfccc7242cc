/**
 * The reads a running execution makes of its own job row (the writes are fenced and live in
 * ownership-repo.ts): what to run, and the timing facts its phase histograms are derived from.
 */
import { and, eq } from "drizzle-orm";
import type { ChatMessage, ToolName } from "../contracts/job";
import type { ExecutionIdentity } from "../domain/identity";
import type { TimingFacts } from "../domain/timing";
import type { Db } from "./client";
import { jobs } from "./schema";

/** What an execution runs: the conversation, the model it asked for, the tools it allows. */
export interface RunnableJob {
  messages: ChatMessage[];
  model: string | null;
  tools: ToolName[];
  tenantId: string;
}

/** The job a started execution runs. Throws if the row is gone (it cannot be, once started). */
export async function loadRunnableJob(db: Db, jobId: string): Promise<RunnableJob> {
  const rows = await db
    .select({ input: jobs.input, model: jobs.model, tools: jobs.tools, tenantId: jobs.tenantId })
    .from(jobs)
    .where(eq(jobs.id, jobId))
    .limit(1);
  const row = rows[0];
  if (!row) throw new Error(`job ${jobId} vanished after it was started`);
  return { messages: row.input.messages, model: row.model, tools: row.tools, tenantId: row.tenantId };
}

/** The five timestamps the API serializes, for this execution's row (one PK read); null if it moved on. */
export async function executionTimingFacts(db: Db, id: ExecutionIdentity): Promise<TimingFacts | null> {
  const rows = await db
    .select({
      created_at: jobs.createdAt,
      started_at: jobs.startedAt,
      prepared_at: jobs.preparedAt,
      first_output_at: jobs.firstOutputAt,
      finished_at: jobs.finishedAt,
    })
    .from(jobs)
    .where(and(eq(jobs.id, id.jobId), eq(jobs.executionId, id.executionId)))
    .limit(1);
  return rows[0] ?? null;
}
