/**
 * A conversation is the tenant's jobs that share a `conversation_id` (there is no conversation
 * table: the id is the client's, scoped by tenant, so two tenants using the same id have two
 * unrelated conversations). History is derived from those jobs: each job's last input message is
 * the user's turn, its output the assistant's answer, with latency from the one serializer.
 */
import { and, asc, desc, eq } from "drizzle-orm";
import type { ConversationMessage } from "../contracts/chat";
import type { ChatMessage } from "../contracts/job";
import type { Db } from "./client";
import { toJobView } from "./job-view";
import { type JobRow, jobs } from "./schema";

export type { ConversationMessage };

/** The most recent `limit` jobs of a conversation, oldest first. */
export async function listConversationJobs(
  db: Db,
  tenantId: string,
  conversationId: string,
  limit = 100,
): Promise<JobRow[]> {
  const rows = await db
    .select()
    .from(jobs)
    .where(and(eq(jobs.tenantId, tenantId), eq(jobs.conversationId, conversationId)))
    .orderBy(desc(jobs.createdAt), desc(jobs.id))
    .limit(limit);
  return rows.reverse();
}

/** Every job of a conversation, oldest first (history reads; bounded by `limit`). */
export async function listConversationJobsOldestFirst(
  db: Db,
  tenantId: string,
  conversationId: string,
  limit = 500,
): Promise<JobRow[]> {
  return db
    .select()
    .from(jobs)
    .where(and(eq(jobs.tenantId, tenantId), eq(jobs.conversationId, conversationId)))
    .orderBy(asc(jobs.createdAt), asc(jobs.id))
    .limit(limit);
}

/** The conversation's turns, oldest first: user message, then the answer once there is one. */
export function conversationMessages(rows: readonly JobRow[]): ConversationMessage[] {
  const out: ConversationMessage[] = [];
  for (const row of rows) {
    const user = [...row.input.messages].reverse().find((m) => m.role === "user");
    if (user) out.push({ role: "user", content: user.content, job_id: row.id, latency: null });
    if (row.output !== null) {
      out.push({ role: "assistant", content: row.output, job_id: row.id, latency: toJobView(row).latency });
    }
  }
  return out;
}

/**
 * The input of the conversation's next job: the history so far (the most recent turns that fit
 * `maxMessages` and `maxChars`, oldest first) plus the new user message.
 */
export function nextJobMessages(
  history: readonly ConversationMessage[],
  content: string,
  bounds: { maxMessages: number; maxChars: number },
): ChatMessage[] {
  const picked: ChatMessage[] = [];
  let chars = content.length;
  for (let i = history.length - 1; i >= 0 && picked.length < bounds.maxMessages - 1; i--) {
    const m = history[i] as ConversationMessage;
    if (chars + m.content.length > bounds.maxChars) break;
    chars += m.content.length;
    picked.push({ role: m.role, content: m.content });
  }
  // Never start the model's context with a dangling answer whose question was cut off.
  while (picked.length > 0 && picked[picked.length - 1]?.role === "assistant") picked.pop();
  return [...picked.reverse(), { role: "user", content }];
}
