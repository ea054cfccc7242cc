/**
 * What a ChatSession needs from the job system, behind one interface so workerd tests can stand
 * in for Postgres and Redis: turning a chat message into a job (the same `createJob` + ready-index
 * ZADD as POST /v1/jobs), cancelling one, looking one up for `resume`, and counting a frame
 * against its API key's request rate (the /v1 middleware's own check).
 */
import type { ApiError } from "../../../src/contracts/errors";
import { type JobView, LIMITS, RESERVED_IDEMPOTENCY_PREFIX } from "../../../src/contracts/job";
import type { ApprovalAnswer, ApprovalBody } from "../../../src/contracts/wait";
import type { CancelStatus } from "../../../src/db/control-repo";
import { conversationMessages, listConversationJobs, nextJobMessages } from "../../../src/db/conversations-repo";
import { toJobView } from "../../../src/db/job-view";
import { getJob } from "../../../src/db/jobs-repo";
import { requestHash } from "../../../src/domain/request-hash";
import { cancelJob } from "../../commands/cancel";
import { decide } from "../../commands/decide";
import { submitJob } from "../../commands/submit";
import { callDependency, createDeps } from "../../deps";
import type { Env } from "../../env";
import { loadConfig } from "../../gateway-config";
import { checkKeyRate } from "../../middleware/rate-limit/rate-limit";

export interface ChatSubmission {
  tenantId: string;
  conversationId: string;
  content: string;
  clientMessageId: string;
  /** The agent reference the message named (or its connection's), resolved at submit like POST /v1/jobs. */
  agent?: string;
  /** The message's W3C traceparent (kept with the job when valid). */
  traceparent?: string;
}

export interface ChatBackend {
  /** Idempotent per (tenant, conversation, client_message_id): a repeat returns the same job. */
  submit(s: ChatSubmission): Promise<{ job: JobView; created: boolean }>;
  cancel(tenantId: string, jobId: string): Promise<CancelStatus>;
  /** As POST /v1/jobs/{id}/approvals/{call_id}: null for an unknown job or call; throws 409 `conflict`. */
  decide(tenantId: string, jobId: string, callId: string, body: ApprovalBody): Promise<ApprovalAnswer | null>;
  findJob(tenantId: string, jobId: string): Promise<JobView | null>;
  /** One frame of the key `keyHash` (RATE_LIMIT_REQUESTS per RATE_LIMIT_WINDOW_S): the refusal past it, else null. */
  checkRate(keyHash: string): Promise<ApiError | null>;
}

/** History sent to the model: the last 20 jobs' turns, within the job input limits. */
const HISTORY_JOBS = 20;
const HISTORY_MAX_CHARS = 128 * 1024;

/**
 * The job key of a chat message. Both ids may contain ":", so the conversation id is
 * length-prefixed: `chat:<length>:<conversation id>:<client message id>` splits one way only
 * ("p" + "q:r" and "p:q" + "r" become `chat:1:p:q:r` and `chat:3:p:q:r`). The `chat:` prefix
 * is reserved (RESERVED_IDEMPOTENCY_PREFIX): a client's own key on POST /v1/jobs may not start
 * with it, so no REST request can name a chat message's job or the other way round.
 */
export function chatIdempotencyKey(conversationId: string, clientMessageId: string): string {
  return `${RESERVED_IDEMPOTENCY_PREFIX}${conversationId.length}:${conversationId}:${clientMessageId}`;
}

/**
 * What the chat key is bound to: the message as its client sent it (its content, and its agent
 * reference as sent, when there is one). Not the job input, which carries the conversation's
 * history and so differs on a retry after another turn finished.
 */
export function chatRequestHash(content: string, agent?: string): Promise<string> {
  return requestHash({ kind: "chat_message", content, ...(agent === undefined ? {} : { agent }) });
}

export function postgresChatBackend(env: Env): ChatBackend {
  // Per call, not per object: clients must not be shared across requests (see deps.ts).
  const deps = () => createDeps(loadConfig(env));
  return {
    async submit({ tenantId, conversationId, content, clientMessageId, agent, traceparent }) {
      const config = loadConfig(env);
      const d = createDeps(config);
      const db = d.db();
      const hash = await chatRequestHash(content, agent);
      const rows = await callDependency("postgres", () =>
        listConversationJobs(db, tenantId, conversationId, HISTORY_JOBS),
      );
      const messages = nextJobMessages(conversationMessages(rows), content, {
        maxMessages: LIMITS.maxMessages,
        maxChars: HISTORY_MAX_CHARS,
      });
      const { job, created } = await submitJob(
        d,
        tenantId,
        {
          input: { messages },
          conversation_id: conversationId,
          ...(agent === undefined ? {} : { agent }),
          idempotency_key: chatIdempotencyKey(conversationId, clientMessageId),
          metadata: { source: "chat", client_message_id: clientMessageId },
        },
        {
          requestHash: hash,
          maxQueued: config.limits.maxQueuedJobsPerTenant,
          models: config.models,
          traceparent: traceparent ?? null,
          trustClientTrace: config.trustClientSampling,
        },
      );
      return { job: toJobView(job), created };
    },
    cancel: (tenantId, jobId) => cancelJob(deps(), tenantId, jobId),
    decide: async (tenantId, jobId, callId, body) =>
      (await decide(deps(), tenantId, jobId, callId, body))?.body ?? null,
    checkRate(keyHash) {
      const config = loadConfig(env);
      return checkKeyRate(createDeps(config).redis, config.limits, keyHash);
    },
    async findJob(tenantId, jobId) {
      const db = deps().db();
      const row = await callDependency("postgres", () => getJob(db, tenantId, jobId));
      return row ? toJobView(row) : null;
    },
  };
}
