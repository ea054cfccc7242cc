/** Chat test doubles: an in-memory job backend standing in for Postgres/Redis, and a frame reader. */
import { runInDurableObject } from "cloudflare:test";
import type { ServerFrame } from "../../src/contracts/chat";
import { ApiError } from "../../src/contracts/errors";
import type { JobView } from "../../src/contracts/job";
import type { ApprovalAnswer, ApprovalBody } from "../../src/contracts/wait";
import type { CancelStatus } from "../../src/db/control-repo";
import type { ChatBackend, ChatSubmission } from "../../workers/durable-objects/chat-session/chat-backend";
import type { ChatSessionObject } from "../../workers/durable-objects/chat-session/chat-session-object";
import { CHAT_HEADERS, chatSessionName } from "../../workers/durable-objects/chat-session/session-address";
import { testEnv } from "./helpers";

export function chatStub(tenantId: string, conversationId: string): DurableObjectStub<ChatSessionObject> {
  return testEnv.CHAT_SESSIONS.get(testEnv.CHAT_SESSIONS.idFromName(chatSessionName(tenantId, conversationId)));
}

export class FakeChatBackend implements ChatBackend {
  readonly jobs = new Map<string, JobView & { tenant: string; content: string; agentRef?: string }>();
  readonly byMessage = new Map<string, string>();
  readonly cancels: string[] = [];

  async submit(s: ChatSubmission): Promise<{ job: JobView; created: boolean }> {
    const key = `${s.tenantId}:${s.conversationId}:${s.clientMessageId}`;
    const existing = this.byMessage.get(key);
    if (existing) return { job: this.jobs.get(existing) as JobView, created: false };
    const id = crypto.randomUUID();
    const job: JobView & { tenant: string; content: string; agentRef?: string } = {
      id,
      conversation_id: s.conversationId,
      state: "queued",
      claimed: false,
      epoch: 0,
      execution_id: null,
      output: null,
      error: null,
      created_at: new Date().toISOString(),
      started_at: null,
      prepared_at: null,
      first_output_at: null,
      finished_at: null,
      latency: {
        dispatch_latency_ms: null,
        preparation_latency_ms: null,
        model_first_output_latency_ms: null,
        first_output_latency_ms: null,
        total_latency_ms: null,
      },
      model: null,
      tools: [],
      metadata: {},
      agent: null,
      usage: {
        prompt_tokens: 0,
        completion_tokens: 0,
        model_calls: 0,
        estimated: false,
        cost_usd: null,
        reserved_usd: 0,
      },
      limits: null,
      budget_added_usd: 0,
      output_json: null,
      waiting_for: null,
      parent_job_id: null,
      root_job_id: null,
      depth: 0,
      recoveries: 0,
      trace_id: id.replaceAll("-", ""),
      schedule_id: null,
      scheduled_for: null,
      priority: 0,
      run_at: null,
      expires_at: null,
      concurrency_key: null,
      forked_from: null,
      tenant: s.tenantId,
      content: s.content,
      // The reference as the session passed it (the real backend resolves it to a version).
      ...(s.agent === undefined ? {} : { agentRef: s.agent }),
    };
    this.jobs.set(id, job);
    this.byMessage.set(key, id);
    return { job, created: true };
  }

  async cancel(tenantId: string, jobId: string): Promise<CancelStatus> {
    const job = this.jobs.get(jobId);
    if (!job || job.tenant !== tenantId) return "not_found";
    this.cancels.push(jobId);
    return "requested";
  }

  readonly decisions: Array<{ jobId: string; callId: string; decision: string; add_usd?: number }> = [];

  /** Records the first decision per call, and answers later ones with it (like the repo). */
  async decide(tenantId: string, jobId: string, callId: string, body: ApprovalBody): Promise<ApprovalAnswer | null> {
    const job = this.jobs.get(jobId);
    if (!job || job.tenant !== tenantId) return null;
    const first = this.decisions.find((d) => d.jobId === jobId && d.callId === callId);
    if (first && first.decision !== body.decision) throw new ApiError("conflict", `call ${callId} was already decided`);
    if (!first) {
      this.decisions.push({
        jobId,
        callId,
        decision: body.decision,
        ...(body.add_usd === undefined ? {} : { add_usd: body.add_usd }),
      });
    }
    return {
      call_id: callId,
      decision: (first?.decision ?? body.decision) as "approve" | "deny",
      note: body.note ?? null,
      decided_at: new Date(0).toISOString(),
      decided_by: "api",
      add_usd: body.add_usd ?? null,
    };
  }

  async findJob(tenantId: string, jobId: string): Promise<JobView | null> {
    const job = this.jobs.get(jobId);
    return job && job.tenant === tenantId ? job : null;
  }

  /** Frames the stand-in rate limit still admits (the real one is the /v1 limiter in Redis). */
  rateBudget = Number.POSITIVE_INFINITY;
  /** The key hash of every frame counted. */
  readonly rateChecks: string[] = [];

  async checkRate(keyHash: string): Promise<ApiError | null> {
    this.rateChecks.push(keyHash);
    if (this.rateBudget <= 0)
      return new ApiError("rate_limited", "more than the test's requests", { retryAfterS: 2.2 });
    this.rateBudget--;
    return null;
  }

  /** The jobs created for a conversation, in creation order. */
  list(): Array<JobView & { content: string; agentRef?: string }> {
    return [...this.jobs.values()];
  }
}

export async function useBackend(stub: DurableObjectStub<ChatSessionObject>, backend: ChatBackend): Promise<void> {
  await runInDurableObject(stub, (instance) => {
    instance.backend = backend;
  });
}

/** A connected chat socket that queues every frame it receives. */
export class ChatClient {
  private readonly frames: ServerFrame[] = [];
  private waiter: (() => void) | undefined;
  closed = false;

  constructor(readonly ws: WebSocket) {
    ws.accept();
    ws.addEventListener("message", (m) => {
      this.frames.push(JSON.parse(String(m.data)) as ServerFrame);
      this.waiter?.();
    });
    ws.addEventListener("close", () => {
      this.closed = true;
      this.waiter?.();
    });
  }

  static async connect(
    stub: DurableObjectStub<ChatSessionObject>,
    tenantId: string,
    conversationId: string,
    multitask = "queue",
    agent?: string,
    keyHash?: string,
  ): Promise<ChatClient> {
    const res = await stub.fetch("https://chat-session/ws", {
      headers: {
        upgrade: "websocket",
        [CHAT_HEADERS.tenant]: tenantId,
        [CHAT_HEADERS.conversation]: conversationId,
        [CHAT_HEADERS.multitask]: multitask,
        ...(agent === undefined ? {} : { [CHAT_HEADERS.agent]: agent }),
        ...(keyHash === undefined ? {} : { [CHAT_HEADERS.keyHash]: keyHash }),
      },
    });
    if (res.status !== 101 || !res.webSocket) throw new Error(`upgrade failed: ${res.status}`);
    return new ChatClient(res.webSocket);
  }

  send(frame: unknown): void {
    this.ws.send(typeof frame === "string" ? frame : JSON.stringify(frame));
  }

  /** The next frame, or a timeout error. */
  async next(timeoutMs = 3_000): Promise<ServerFrame> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const f = this.frames.shift();
      if (f) return f;
      if (this.closed) throw new Error("socket closed");
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new Error("timed out waiting for a frame");
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, remaining);
        this.waiter = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.waiter = undefined;
    }
  }

  async take(n: number, timeoutMs = 3_000): Promise<ServerFrame[]> {
    const out: ServerFrame[] = [];
    while (out.length < n) out.push(await this.next(timeoutMs));
    return out;
  }

  /** Frames until (and including) the first that matches. */
  async until(match: (f: ServerFrame) => boolean, timeoutMs = 3_000): Promise<ServerFrame[]> {
    const out: ServerFrame[] = [];
    for (;;) {
      const f = await this.next(timeoutMs);
      out.push(f);
      if (match(f)) return out;
    }
  }

  /** Asserts nothing arrives for `ms`. */
  async quiet(ms = 300): Promise<void> {
    try {
      const f = await this.next(ms);
      throw new Error(`expected no frame, got ${JSON.stringify(f)}`);
    } catch (err) {
      if (!/timed out/.test(String(err))) throw err;
    }
  }

  close(): void {
    try {
      this.ws.close(1000, "bye");
    } catch {}
  }
}

export const isTerminalFrame = (f: ServerFrame) =>
  f.type === "event" &&
  ["run.completed", "run.failed", "run.cancelled", "run.lost", "run.timed_out"].includes(f.event.type);
