/**
 * One virtual user's run: a real HTTP submit, then the job's SSE stream, then the authoritative
 * terminal state read back from `GET /v1/jobs/{id}`. Strict success needs both halves:
 * - stream: ids contiguous from 1 (no duplicate, no gap, also across a reconnect), exactly one
 *   terminal event and nothing after it, the scenario's events present;
 * - state: the job's terminal state, output and error match what the scenario means.
 * Client timings start at `t0` (the submit, or the user's arrival in the baseline mode) and are
 * never mixed with the server's latency fields, which are copied beside them.
 *
 * Submit, cancel and the read-back go through the typed client (src/client/). The stream does
 * not: the client drops a repeated id and resumes by itself, which is right for an application
 * and wrong for this verifier, whose job is to see every id the server sends (a duplicate or a
 * gap is a failure here) and to drop and resume on purpose in the `reconnect` scenario.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { Agent, fetch as undiciFetch } from "undici";
import { EarClient } from "../../src/client/client";
import { ApiClientError } from "../../src/client/http";
import { isTerminalEventType } from "../../src/contracts/events";
import type { JobView as ApiJobView, CreateJobBody } from "../../src/contracts/job";
import { stateOfTerminalEvent } from "../../src/contracts/job-state";
import { readSse, type SseEvent } from "../lib/sse";
import { type GatewayTiming, parseServerTiming } from "./server-timing";
import type { ModelScript, RunRecord, Scenario, Target } from "./types";

export interface VuContext {
  target: Target;
  script: ModelScript;
  runTimeoutMs: number;
  runId: string;
  step: number;
  /** Called for every event the client sees (progress bar). */
  onEvent?: (vu: number, type: string) => void;
  /** Extra metadata on the job (baseline mode records the simulated receiving host). */
  metadata?: Record<string, unknown>;
}

type JobView = ApiJobView & { latency: NonNullable<RunRecord["server"]> };

/** An error's message with its cause's (undici's "fetch failed" says why only in its cause). */
const errText = (err: unknown): string => {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  const cause = e.cause ? (e.cause.code ?? e.cause.message) : undefined;
  return cause ? `${e.message} (${cause})` : String(e.message);
};

const httpProblem = (what: string, err: unknown) =>
  err instanceof ApiClientError ? `${what} answered HTTP ${err.status}` : `${what} failed: ${errText(err)}`;

function replyWords(n: number, token: string): string {
  const words = [`load ${token}:`];
  for (let i = 1; i < Math.max(2, n); i++) words.push(`w${i}`);
  return words.join(" ");
}

interface Plan {
  content: string;
  reply: string;
  tools?: string[];
}

function planFor(scenario: Scenario, token: string, s: ModelScript): Plan {
  const timing = { ttft_ms: s.ttftMs, tokens_per_s: s.tokensPerS };
  const mock = (o: Record<string, unknown>) => `!mock ${JSON.stringify({ ...o, ...timing })}`;
  switch (scenario) {
    case "text": {
      const reply = replyWords(s.replyTokens, token);
      return { content: mock({ reply }), reply };
    }
    case "reconnect": {
      // Long enough that the drop lands mid-stream.
      const reply = replyWords(Math.max(s.replyTokens, 60), token);
      return { content: mock({ reply }), reply };
    }
    case "cancel": {
      // Far longer than the cancel takes: a completed run here means the cancel did not work.
      const reply = replyWords(Math.max(s.replyTokens * 4, 400), token);
      return { content: mock({ reply }), reply };
    }
    case "tool": {
      const reply = `tool ok ${token}`;
      return {
        content: mock({ reply, tool_calls: [{ name: "shell", args: { command: `echo ${token}` } }] }),
        reply,
        tools: ["shell"],
      };
    }
  }
}

class StreamState {
  lastId = 0;
  events = 0;
  text = "";
  deltas = 0;
  /** `run.recovered` events seen (the run continued on another execution). */
  recoveries = 0;
  /** Model turns asked again (`model.turn` reason `recovered` or `lease_lost`): their text replaced the earlier turn's. */
  turnsAskedAgain = 0;
  terminal: string | null = null;
  firstEventAt: number | null = null;
  firstDeltaAt: number | null = null;
  terminalAt: number | null = null;
  /** Host emit (`ts`) → receive, per event (wall clock, ms). */
  pathMs: number[] = [];
  firstEventPathMs: number | null = null;
  terminalPathMs: number | null = null;
  terminalWall: number | null = null;
  host: string | null = null;
  cancelAccepted = false;
  toolCalls: Array<{ id?: string; name?: string }> = [];
  toolResults: Array<{ id?: string; ok?: boolean; output?: unknown }> = [];
  problems: string[] = [];

  take(ev: SseEvent, now: number, wall = Date.now()): void {
    this.events++;
    const id = Number(ev.id);
    if (!Number.isSafeInteger(id)) this.problems.push(`event without a numeric id (${ev.event})`);
    else if (id <= this.lastId) this.problems.push(`duplicate event id ${id} (last ${this.lastId})`);
    else if (id !== this.lastId + 1) this.problems.push(`gap: event id ${id} after ${this.lastId}`);
    if (Number.isSafeInteger(id)) this.lastId = Math.max(this.lastId, id);
    if (this.terminal) this.problems.push(`event ${ev.event} after terminal ${this.terminal}`);
    this.firstEventAt ??= now;
    let payload: Record<string, unknown> = {};
    let emitted = Number.NaN;
    try {
      const env = JSON.parse(ev.data) as { payload?: Record<string, unknown>; ts?: unknown };
      payload = (env.payload ?? {}) as Record<string, unknown>;
      if (typeof env.ts === "string") emitted = Date.parse(env.ts);
    } catch {
      this.problems.push(`event ${id} data is not JSON`);
    }
    const path = Number.isFinite(emitted) ? Math.max(0, wall - emitted) : null;
    if (path !== null) this.pathMs.push(path);
    if (this.events === 1) this.firstEventPathMs = path;
    switch (ev.event) {
      case "run.started":
        this.host = typeof payload.host === "string" ? payload.host : this.host;
        break;
      case "run.recovered":
        this.recoveries++;
        break;
      case "model.turn":
        // docs/events.md "A turn can start over": a turn asked again streams its text from the
        // start, and a client keeps the last turn's (the job's output is that turn's text).
        if (payload.reason === "recovered" || payload.reason === "lease_lost") {
          this.turnsAskedAgain++;
          this.text = "";
        }
        break;
      case "model.delta": {
        const t = typeof payload.text === "string" ? payload.text : "";
        if (t) {
          this.firstDeltaAt ??= now;
          this.deltas++;
        }
        this.text += t;
        break;
      }
      case "tool.call":
        this.toolCalls.push(payload as { id?: string; name?: string });
        break;
      case "tool.result":
        this.toolResults.push(payload as { id?: string; ok?: boolean; output?: unknown });
        break;
      case "cancel.accepted":
        this.cancelAccepted = true;
        break;
    }
    if (isTerminalEventType(ev.event)) {
      if (!this.terminal) {
        this.terminal = ev.event;
        this.terminalAt = now;
        this.terminalWall = wall;
        this.terminalPathMs = path;
      }
    }
  }
}

/** A run's record before anything is known: every measure null, not ok (also a lost client's record). */
export function emptyRecord(step: number, vu: number, scenario: Scenario, conversationId: string): RunRecord {
  return {
    step,
    vu,
    scenario,
    jobId: null,
    conversationId,
    ok: false,
    streamOk: false,
    stateOk: false,
    problems: [],
    finalState: null,
    errorCode: null,
    host: null,
    events: 0,
    recoveries: 0,
    turnsAskedAgain: 0,
    connectionRetries: 0,
    client: {
      submitMs: null,
      preparationMs: null,
      firstTokenMs: null,
      totalMs: null,
      cancelMs: null,
      resumedEvents: null,
    },
    server: null,
    path: {
      clientSetupMs: null,
      submitToInsertMs: null,
      insertToAnswerMs: null,
      answerToStreamMs: null,
      streamHeadersMs: null,
      headersToFirstEventMs: null,
      firstEventPathMs: null,
      terminalPathMs: null,
      finishedToReceiveMs: null,
      readBackMs: null,
    },
  };
}

/**
 * One virtual user is one user's client: its requests share a connection pool of its own (its
 * submit's connection carries its stream, as a browser tab's would), never another user's.
 * With one pool for every VU of a process (the global fetch), a VU's request went out on a
 * connection another VU's answer had just left idle; when the gateway closed that connection
 * first (its idle timer runs from when it wrote the answer, the client's from when its busy loop
 * read it), the request failed `ECONNRESET` or `UND_ERR_SOCKET` before any byte came back.
 * Measured on `npm run dev`, step 100 of the text scenario: 5–100 of 100 runs strict with the
 * shared pool (7 runs), 100/100 with a pool per VU; docs/capacity.md.
 */
export async function runVu(
  ctx: VuContext,
  vu: number,
  scenario: Scenario,
  t0 = performance.now(),
): Promise<RunRecord> {
  const pool = new Agent({ connections: 4 });
  let retried = 0;
  // The gateway's Server-Timing of the submit's answer and of the event stream's head.
  const gateway: { submit: GatewayTiming | null; stream: GatewayTiming | null } = { submit: null, stream: null };
  const once = async (input: string | URL, init?: RequestInit) => {
    const res = await undiciFetch(input, { ...(init as object), dispatcher: pool });
    const path = new URL(String(input)).pathname;
    const method = (init?.method ?? "GET").toUpperCase();
    const timing = () => parseServerTiming(res.headers.get("server-timing"));
    if (method === "POST" && path === "/v1/jobs") gateway.submit = timing();
    else if (method === "GET" && path.endsWith("/events") && !gateway.stream) gateway.stream = timing();
    return res;
  };
  // A GET that failed on its connection before any answer is sent again once, as browsers do
  // with a kept-alive connection the server closed as the request went out (an SSE response's
  // connection, reused for the read-back, was closed by the gateway as the GET left: 1 of 100
  // at step 100). Counted per run (connectionRetries); a POST is never sent twice.
  const vuFetch = (async (input: string | URL, init?: RequestInit) => {
    try {
      return await once(input, init);
    } catch (err) {
      const code = (err as { cause?: { code?: string } }).cause?.code;
      const get = (init?.method ?? "GET").toUpperCase() === "GET";
      if (!get || init?.signal?.aborted || (code !== "UND_ERR_SOCKET" && code !== "ECONNRESET")) throw err;
      retried++;
      return await once(input, init);
    }
  }) as unknown as typeof fetch;
  try {
    const rec = await runVuOn(ctx, vu, scenario, t0, vuFetch);
    rec.connectionRetries = retried;
    rec.path.submitGateway = gateway.submit;
    rec.path.streamGateway = gateway.stream;
    return rec;
  } finally {
    await pool.close().catch(() => {});
  }
}

async function runVuOn(
  ctx: VuContext,
  vu: number,
  scenario: Scenario,
  t0: number,
  vuFetch: typeof fetch,
): Promise<RunRecord> {
  const { target } = ctx;
  const token = `${ctx.runId}-s${ctx.step}-v${vu}`;
  const conversationId = `load-${ctx.runId}-s${ctx.step}-v${vu}`;
  const plan = planFor(scenario, token, ctx.script);
  const auth = { authorization: `Bearer ${target.apiKey}` };
  const api = new EarClient({ baseUrl: target.gatewayUrl, credential: target.apiKey, fetch: vuFetch });
  const deadline = AbortSignal.timeout(ctx.runTimeoutMs);
  const rec = emptyRecord(ctx.step, vu, scenario, conversationId);
  const since = (t: number | null) => (t === null ? null : Math.max(0, t - t0));
  const streamProblems: string[] = [];
  const stateProblems: string[] = [];

  // 1. submit (wall clock beside the monotonic one: the row's created_at is on the wall clock)
  const submitSentWall = Date.now();
  rec.path.clientSetupMs = Math.max(0, performance.now() - t0);
  let answeredAt: number | null = null;
  try {
    const { job, created } = await api.submit(
      {
        input: { messages: [{ role: "user", content: plan.content }] },
        conversation_id: conversationId,
        ...(plan.tools ? { tools: plan.tools as NonNullable<CreateJobBody["tools"]> } : {}),
        metadata: { load_run: ctx.runId, step: ctx.step, vu, scenario, ...ctx.metadata },
      },
      { signal: deadline },
    );
    answeredAt = performance.now();
    rec.client.submitMs = since(answeredAt);
    const createdWall = Date.parse(job.created_at);
    if (Number.isFinite(createdWall)) {
      rec.path.submitToInsertMs = Math.max(0, createdWall - submitSentWall);
      rec.path.insertToAnswerMs = Math.max(0, Date.now() - createdWall);
    }
    if (!created) {
      rec.problems.push("submit answered HTTP 200 (an existing job), expected 202");
      return rec;
    }
    rec.jobId = job.id;
  } catch (err) {
    rec.client.submitMs = since(performance.now());
    rec.problems.push(httpProblem("submit", err));
    return rec;
  }
  const jobId = rec.jobId;

  // 2. stream (one connection, or two for `reconnect`)
  const st = new StreamState();
  let cancelSentAt: number | null = null;
  let cancelPost: Promise<void> | null = null;
  const eventsUrl = `${target.gatewayUrl}/v1/jobs/${jobId}/events`;
  let streamRequestedAt: number | null = null;
  let streamOpenedAt: number | null = null;
  const consume = async (
    headers: Record<string, string>,
    stopAfterDeltas: number | null,
  ): Promise<"ended" | "dropped"> => {
    const conn = new AbortController();
    const first = streamRequestedAt === null;
    if (first) streamRequestedAt = performance.now();
    const gen = readSse(eventsUrl, {
      headers: { ...auth, ...headers },
      signal: AbortSignal.any([deadline, conn.signal]),
      fetch: vuFetch,
      onOpen: first
        ? () => {
            streamOpenedAt = performance.now();
          }
        : undefined,
    });
    try {
      for (;;) {
        const next = await gen.next();
        if (next.done) return "ended";
        const now = performance.now();
        st.take(next.value, now);
        ctx.onEvent?.(vu, next.value.event);
        if (scenario === "cancel" && st.firstDeltaAt !== null && !cancelPost && !st.terminal) {
          cancelSentAt = performance.now();
          cancelPost = api
            .cancel(jobId, { signal: deadline })
            .then(({ status }) => {
              if (status !== "requested") stateProblems.push(`cancel status ${status} (expected requested)`);
            })
            .catch((e: unknown) => {
              stateProblems.push(httpProblem("cancel", e));
            });
        }
        if (st.terminal) continue; // read to the end: the stream must close after the terminal event
        if (stopAfterDeltas !== null && st.deltas >= stopAfterDeltas) {
          conn.abort(new Error("load: drop mid-stream"));
          return "dropped";
        }
      }
    } finally {
      await gen.return(undefined).catch(() => {});
    }
  };

  try {
    if (scenario === "reconnect") {
      const first = await consume({}, 3);
      if (first === "dropped") {
        await sleep(150 + Math.floor(Math.random() * 150));
        const before = st.events;
        await consume({ "last-event-id": String(st.lastId) }, null);
        rec.client.resumedEvents = st.events - before;
        if (rec.client.resumedEvents === 0) streamProblems.push("the resumed stream delivered nothing");
      } else {
        streamProblems.push("the stream ended before the planned mid-stream drop");
      }
    } else {
      await consume({}, null);
    }
  } catch (err) {
    streamProblems.push(
      deadline.aborted ? `no terminal event within ${ctx.runTimeoutMs} ms` : `stream error: ${errText(err)}`,
    );
  }
  await cancelPost;
  rec.events = st.events;
  rec.host = st.host;
  rec.client.preparationMs = since(st.firstEventAt);
  rec.client.firstTokenMs = since(st.firstDeltaAt);
  rec.client.totalMs = since(st.terminalAt);
  const diff = (a: number | null, b: number | null) => (a === null || b === null ? null : Math.max(0, b - a));
  rec.path.answerToStreamMs = diff(answeredAt, streamRequestedAt);
  rec.path.streamHeadersMs = diff(streamRequestedAt, streamOpenedAt);
  rec.path.headersToFirstEventMs = diff(streamOpenedAt, st.firstEventAt);
  rec.path.firstEventPathMs = st.firstEventPathMs;
  rec.path.terminalPathMs = st.terminalPathMs;
  rec.eventPathSamples = st.pathMs;
  rec.recoveries = st.recoveries;
  rec.turnsAskedAgain = st.turnsAskedAgain;
  if (cancelSentAt !== null && st.terminalAt !== null) rec.client.cancelMs = Math.max(0, st.terminalAt - cancelSentAt);
  streamProblems.push(...st.problems);
  if (!st.terminal && !streamProblems.some((p) => p.startsWith("no terminal"))) {
    streamProblems.push("the stream closed without a terminal event");
  }

  // 3. the authoritative terminal state
  // The read-back verifies the run; it is not what the user waits for (the stream has ended). It
  // waits as long as the run's deadline allows: with a fixed 10 s, a step of 1,000 on npm run dev
  // failed 195 runs whose streams had ended correctly, because the gateway was still answering the
  // step's other requests (docs/capacity.md). Its time is recorded (readBackMs) and printed.
  let job: JobView | null = null;
  const readStarted = performance.now();
  const readUntil = readStarted + 15_000;
  while (performance.now() < readUntil) {
    try {
      job = (await api.get(jobId, { signal: deadline })).job;
      rec.path.readBackMs ??= Math.round(performance.now() - readStarted);
      if (job.state !== "queued" && job.state !== "running") break;
    } catch (err) {
      stateProblems.push(httpProblem("GET job", err));
      break;
    }
    await sleep(100);
  }
  if (job) {
    rec.finalState = job.state;
    rec.errorCode = job.error?.code ?? null;
    rec.server = job.latency ?? null;
    const finishedWall = job.finished_at ? Date.parse(job.finished_at) : Number.NaN;
    if (st.terminalWall !== null && Number.isFinite(finishedWall)) {
      rec.path.finishedToReceiveMs = Math.max(0, st.terminalWall - finishedWall);
    }
    if (st.terminal && stateOfTerminalEvent(st.terminal) !== job.state) {
      stateProblems.push(`stream ended ${st.terminal} but the job is ${job.state}`);
    }
    checkMeaning(scenario, plan, token, job, st, streamProblems, stateProblems);
  } else if (!stateProblems.length) {
    stateProblems.push("no terminal state read back");
  }

  rec.streamOk = streamProblems.length === 0;
  rec.stateOk = stateProblems.length === 0 && job !== null;
  rec.ok = rec.streamOk && rec.stateOk;
  rec.problems = [...streamProblems.map((p) => `stream: ${p}`), ...stateProblems.map((p) => `state: ${p}`)];
  return rec;
}

function checkMeaning(
  scenario: Scenario,
  plan: Plan,
  token: string,
  job: JobView,
  st: StreamState,
  streamProblems: string[],
  stateProblems: string[],
): void {
  const failedWith = job.state === "failed" ? ` (${job.error?.code ?? "no error code"})` : "";
  switch (scenario) {
    case "text":
    case "reconnect":
      if (job.state !== "completed") stateProblems.push(`job is ${job.state}${failedWith}, expected completed`);
      else if (job.output !== plan.reply) stateProblems.push("job output differs from the scripted reply");
      if (st.terminal === "run.completed" && st.text !== plan.reply) {
        streamProblems.push("streamed text differs from the scripted reply (duplicate or missing delta)");
      }
      break;
    case "tool": {
      if (job.state !== "completed") stateProblems.push(`job is ${job.state}${failedWith}, expected completed`);
      else if (job.output !== plan.reply) stateProblems.push("job output differs from the scripted final reply");
      const call = st.toolCalls.find((c) => c.name === "shell");
      if (!call) streamProblems.push("no tool.call for shell");
      const result = st.toolResults.find((r) => !call?.id || r.id === call.id);
      if (!result) streamProblems.push("no tool.result");
      else if (result.ok !== true) {
        streamProblems.push(`tool.result is not ok: ${JSON.stringify(result.output ?? null).slice(0, 160)}`);
      } else if (!JSON.stringify(result.output ?? "").includes(token)) {
        streamProblems.push("tool.result output lacks the echoed token");
      }
      break;
    }
    case "cancel":
      if (job.state !== "cancelled") stateProblems.push(`job is ${job.state}${failedWith}, expected cancelled`);
      if (st.terminal && st.terminal !== "run.cancelled")
        streamProblems.push(`terminal ${st.terminal}, expected run.cancelled`);
      if (!st.cancelAccepted) streamProblems.push("no cancel.accepted event");
      if (!plan.reply.startsWith(st.text)) streamProblems.push("streamed text is not a prefix of the scripted reply");
      if (job.output !== null && !plan.reply.startsWith(job.output)) {
        stateProblems.push("cancelled job's partial output is not a prefix of the reply");
      }
      break;
  }
}
