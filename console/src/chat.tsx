/**
 * Chat over the conversation's WebSocket (the client's ChatConnection, which reconnects, resumes
 * each followed job from its last offset and resends unanswered messages). Each turn is a user
 * message and the job it became; its events are kept by offset, and one at or below the last kept
 * is dropped here too, so no path can repeat text. A reload starts from the conversation's history
 * and follows an unfinished job again from its first event.
 */
import { useEffect, useRef, useState } from "preact/hooks";
import type { ChatConnection } from "../../src/client/chat";
import { isFinalState } from "../../src/contracts/job-state";
import { AgentOptions, useLiveAgents } from "./agent-options";
import { AnswerBody, OutputJson, RunFacts } from "./answer";
import {
  ApiClientError,
  type ChatStatus,
  client,
  conversationUsed,
  isTerminal,
  isUnusedConversation,
  type JobView,
  type LatencyView,
  type ServerFrame,
} from "./api";
import { ApprovalCard } from "./approval";
import { DebugPanel } from "./debug-panel";
import { foldRun, type OffsetEvent, pendingWait } from "./run";

type Policy = "queue" | "reject" | "interrupt";

interface Turn {
  key: string;
  user: string | null;
  clientMessageId?: string;
  jobId?: string;
  job?: JobView;
  events: OffsetEvent[];
  lastOffset: number;
  /** The answer from history, until events are loaded. */
  historyText?: string;
  historyLatency?: LatencyView | null;
  live: boolean;
  queuedAt?: number;
  note?: string;
  error?: string;
  debugOpen?: boolean;
  /** The job view reads asked for, and the newest applied: an older read answering late is dropped. */
  viewsAsked?: number;
  viewApplied?: number;
}

const AGENT_KEY = "ear.console.agent.";

/**
 * The agent a conversation's messages run, as picked in its composer: kept per conversation in
 * this tab's sessionStorage so a reload (or "Chat with it" on an agent's page) keeps it. A name
 * without a version, so each message runs the agent's latest version at its submit.
 */
export function conversationAgent(conversationId: string): string | null {
  return sessionStorage.getItem(AGENT_KEY + conversationId);
}

export function setConversationAgent(conversationId: string, agent: string): void {
  if (agent) sessionStorage.setItem(AGENT_KEY + conversationId, agent);
  else sessionStorage.removeItem(AGENT_KEY + conversationId);
}

/** Job views fetched for a reloaded conversation's answers (their agent and usage); older ones show text and latency only. */
const HISTORY_VIEWS = 20;

function newId(): string {
  return `m-${crypto.randomUUID()}`;
}

/** Events after which the job's state has changed: the badge reads the job view again. */
const STATE_EVENTS = new Set(["run.started", "run.suspended", "run.resumed"]);

const STATUS_TEXT: Record<ChatStatus, string> = {
  connecting: "connecting…",
  open: "connected",
  reconnecting: "reconnecting…",
  closed: "disconnected",
};

export function Chat({ conversationId }: { conversationId: string }) {
  const turns = useRef<Turn[]>([]);
  const socket = useRef<ChatConnection | null>(null);
  const [, setTick] = useState(0);
  const [status, setStatus] = useState<ChatStatus>("connecting");
  const [banner, setBanner] = useState<string | null>(null);
  const [draft, setDraft] = useState("");
  const [policy, setPolicy] = useState<Policy>("queue");
  const [agent, setAgentState] = useState<string>(() => conversationAgent(conversationId) ?? "");
  const agents = useLiveAgents();
  const setAgent = (a: string) => {
    setConversationAgent(conversationId, a);
    setAgentState(a);
  };
  const logRef = useRef<HTMLOListElement>(null);
  const bump = () => setTick((t) => t + 1);

  useEffect(() => {
    let disposed = false;
    turns.current = [];
    setBanner(null);
    setAgentState(conversationAgent(conversationId) ?? "");
    const byJob = (id: string) => turns.current.find((t) => t.jobId === id);

    const refreshJob = async (t: Turn) => {
      if (!t.jobId) return;
      t.viewsAsked = (t.viewsAsked ?? 0) + 1;
      const asked = t.viewsAsked;
      try {
        const view = await client.get(t.jobId);
        if (asked < (t.viewApplied ?? 0)) return;
        t.viewApplied = asked;
        t.job = view.job;
        bump();
      } catch {}
    };

    /** Fills in the user text of jobs another tab sent (a `job` frame carries no input). */
    const fillUserTexts = async () => {
      const missing = turns.current.filter((t) => t.user === null && t.jobId);
      if (!missing.length) return;
      const messages = await client.messages(conversationId).then(
        (m) => m.messages,
        () => [],
      );
      for (const t of missing) {
        const m = messages.find((x) => x.job_id === t.jobId && x.role === "user");
        if (m) t.user = m.content;
      }
      bump();
    };

    const onFrame = (f: ServerFrame) => {
      if (disposed) return;
      switch (f.type) {
        case "job": {
          let t =
            (f.client_message_id && turns.current.find((x) => x.clientMessageId === f.client_message_id)) ||
            byJob(f.job.id);
          if (!t) {
            // Sent from another tab or client of this conversation.
            t = { key: f.job.id, jobId: f.job.id, user: null, events: [], lastOffset: 0, live: true };
            turns.current.push(t);
            void fillUserTexts();
          }
          t.jobId = f.job.id;
          t.job = f.job;
          t.queuedAt = undefined;
          t.live = !isFinalState(f.job.state);
          break;
        }
        case "event": {
          const t = byJob(f.event.job_id);
          if (!t || f.offset <= t.lastOffset) return;
          t.events.push({ offset: f.offset, event: f.event });
          t.lastOffset = f.offset;
          if (isTerminal(f.event.type)) {
            t.live = false;
            void refreshJob(t);
          } else if (STATE_EVENTS.has(f.event.type)) {
            // The footer's badge follows the job's state: `running` from the execution's first
            // event (the host wrote it before emitting), `waiting` at a suspend, and so on.
            void refreshJob(t);
          }
          break;
        }
        case "queued": {
          const t = turns.current.find((x) => x.clientMessageId === f.client_message_id);
          if (t) t.queuedAt = f.position;
          break;
        }
        case "cancel": {
          const t = byJob(f.job_id);
          if (t) t.note = `cancel: ${f.status.replace("_", " ")}`;
          break;
        }
        case "error": {
          const t = f.client_message_id && turns.current.find((x) => x.clientMessageId === f.client_message_id);
          if (t) t.error = `${f.error.code}: ${f.error.message}`;
          else setBanner(`${f.error.code}: ${f.error.message}`);
          break;
        }
      }
      bump();
    };

    (async () => {
      try {
        const { messages } = isUnusedConversation(conversationId)
          ? { messages: [] }
          : await client.messages(conversationId);
        for (const m of messages) {
          let t = byJob(m.job_id);
          if (!t) {
            t = { key: m.job_id, jobId: m.job_id, user: null, events: [], lastOffset: 0, live: false };
            turns.current.push(t);
          }
          if (m.role === "user") t.user = m.content;
          else {
            t.historyText = m.content;
            t.historyLatency = m.latency;
          }
        }
        // A job without an answer yet may still be running: it is followed from its first event.
        // The newest answers also get their job view, for the agent and tokens in their footers.
        await Promise.all(
          turns.current
            .filter((t, i) => t.historyText === undefined || i >= turns.current.length - HISTORY_VIEWS)
            .map(async (t) => {
              await refreshJob(t);
              if (t.job && !isFinalState(t.job.state)) t.live = true;
            }),
        );
      } catch (err) {
        // 404: no job in this conversation yet (a new one).
        if (!(err instanceof ApiClientError && err.status === 404)) setBanner(`history: ${(err as Error).message}`);
      }
      if (disposed) return;
      bump();
      const conn = client.chat(conversationId);
      socket.current = conn;
      conn.onFrame(onFrame);
      conn.onStatus(setStatus);
      setStatus(conn.status);
      for (const t of turns.current) if (t.jobId && t.live) conn.resume(t.jobId, t.lastOffset);
    })();
    return () => {
      disposed = true;
      socket.current?.close();
      socket.current = null;
    };
  }, [conversationId]);

  // Keep the newest text in view while it streams, unless the reader scrolled up.
  useEffect(() => {
    const el = document.scrollingElement;
    if (el && el.scrollHeight - el.scrollTop - el.clientHeight < 200) el.scrollTop = el.scrollHeight;
  });

  const send = (e: Event) => {
    e.preventDefault();
    const content = draft.trim();
    if (!content) return;
    const t: Turn = { key: newId(), user: content, events: [], lastOffset: 0, live: false };
    t.clientMessageId = t.key;
    turns.current.push(t);
    conversationUsed(conversationId);
    socket.current?.send(content, {
      client_message_id: t.clientMessageId,
      multitask: policy,
      ...(agent ? { agent } : {}),
    });
    setDraft("");
    bump();
  };

  const toggleDebug = async (t: Turn) => {
    t.debugOpen = !t.debugOpen;
    bump();
    if (!t.debugOpen || !t.jobId) return;
    if (!t.job || !isFinalState(t.job.state))
      t.job = await client.get(t.jobId).then(
        (a) => a.job,
        () => t.job,
      );
    // A finished job from history: its events come from the log (SSE replay).
    if (!t.live && t.events.length === 0) {
      const got: OffsetEvent[] = [];
      try {
        for await (const { id, event } of client.events(t.jobId)) got.push({ offset: id, event });
      } catch (err) {
        t.note = `events: ${(err as Error).message}`;
      }
      if (t.events.length === 0) {
        t.events = got;
        t.lastOffset = got.at(-1)?.offset ?? 0;
      }
    }
    bump();
  };

  return (
    <div class="chat">
      <div class="chat-head">
        <h2>
          Conversation <code>{conversationId}</code>
        </h2>
        <span class={`status status-${status}`} role="status" data-testid="socket-status">
          {STATUS_TEXT[status]}
        </span>
      </div>
      {banner && (
        <p class="banner" role="alert">
          {banner}
        </p>
      )}
      <ol class="turns" ref={logRef} aria-label="Messages">
        {turns.current.map((t) => {
          const run = t.events.length ? foldRun(t.events) : null;
          const wait = run && t.jobId ? pendingWait(run) : null;
          const final = t.job ? isFinalState(t.job.state) : !t.live && t.historyText !== undefined;
          const latency = t.job && isFinalState(t.job.state) ? t.job.latency : (t.historyLatency ?? null);
          return (
            <li key={t.key} class="turn" data-job-id={t.jobId ?? ""}>
              {t.user !== null && <div class="msg user">{t.user}</div>}
              <article class="msg answer" aria-busy={t.live} data-testid="answer" data-state={t.job?.state ?? ""}>
                <div class="answer-text" data-testid="answer-text">
                  {run ? <AnswerBody turns={run.turns} /> : (t.historyText ?? "")}
                  {t.live && !wait && <span class="cursor" aria-hidden="true" />}
                </div>
                {wait && t.jobId && <ApprovalCard key={wait.call_id} jobId={t.jobId} wait={wait} />}
                {t.queuedAt !== undefined && !t.jobId && <p class="muted">queued, position {t.queuedAt}</p>}
                {t.error && (
                  <p class="error" role="alert">
                    {t.error}
                  </p>
                )}
                {t.job?.error && <p class="error">{`${t.job.state}: ${t.job.error.code} — ${t.job.error.message}`}</p>}
                <footer class="answer-foot">
                  {final && latency && (
                    <span data-testid="total-latency" data-ms={latency.total_latency_ms ?? ""}>
                      total {latency.total_latency_ms ?? "–"} ms
                    </span>
                  )}
                  {final && t.job && <RunFacts job={t.job} />}
                  {t.job && t.job.state !== "completed" && (
                    <span class={`state state-${t.job.state}`} data-testid="job-state">
                      {t.job.state}
                    </span>
                  )}
                  {t.note && <span class="muted">{t.note}</span>}
                  {t.jobId && t.live && (
                    <button type="button" class="danger" onClick={() => t.jobId && socket.current?.cancel(t.jobId)}>
                      Cancel
                    </button>
                  )}
                  {t.jobId && (
                    <button type="button" aria-expanded={!!t.debugOpen} onClick={() => void toggleDebug(t)}>
                      {t.debugOpen ? "Hide debug" : "Debug"}
                    </button>
                  )}
                  {t.jobId && <a href={`#/jobs/${t.jobId}`}>Inspect</a>}
                </footer>
                {final && t.job && <OutputJson job={t.job} />}
                {t.debugOpen && <DebugPanel job={t.job ?? null} events={t.events} />}
              </article>
            </li>
          );
        })}
      </ol>
      <form class="composer" onSubmit={send}>
        <label for="message" class="sr-only">
          Message
        </label>
        <textarea
          id="message"
          rows={2}
          placeholder="Message (Enter sends, Shift+Enter for a new line)"
          value={draft}
          onInput={(e) => setDraft((e.target as HTMLTextAreaElement).value)}
          onKeyDown={(e) => {
            if (e.key === "Enter" && !e.shiftKey && !e.isComposing) send(e);
          }}
        />
        <label class="policy">
          Agent{" "}
          <select
            data-testid="agent-picker"
            value={agent}
            onChange={(e) => setAgent((e.target as HTMLSelectElement).value)}
          >
            <AgentOptions agents={agents} chosen={agent} />
          </select>
        </label>
        <label class="policy">
          If busy{" "}
          <select value={policy} onChange={(e) => setPolicy((e.target as HTMLSelectElement).value as Policy)}>
            <option value="queue">queue</option>
            <option value="reject">reject</option>
            <option value="interrupt">interrupt</option>
          </select>
        </label>
        <button type="submit" class="primary" disabled={!draft.trim()}>
          Send
        </button>
      </form>
    </div>
  );
}
