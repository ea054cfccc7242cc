/**
 * The read a running execution makes of its own job row (the writes are fenced and live in
 * ownership-repo.ts): what to run. Its phase histograms' timing facts come back from the
 * terminal write itself.
 */
import { eq } from "drizzle-orm";
import type { ChatMessage, ToolName } from "../contracts/job";
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
