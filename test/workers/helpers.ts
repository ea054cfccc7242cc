/**
 * Shared helpers for the workerd tests: typed env, envelope builders, an SSE reader, and a fake
 * Postgres per job (its executions with their claim tokens, and its row) that stands in for the
 * rows a real host would have written: these tests run without a database.
 */
import { runInDurableObject } from "cloudflare:test";
import { env, exports as exportsOfMain } from "cloudflare:workers";
import type { EventEnvelope, EventType, IngestBatch } from "../../src/contracts/events";
import type { JobState } from "../../src/contracts/job-state";
import type { ChatSessionObject } from "../../workers/durable-objects/chat-session/chat-session-object";
import type { JobEventsObject } from "../../workers/durable-objects/job-events/job-events-object";
import type {
  ExecutionFacts,
  ExecutionHistoryEntry,
  JobStateFacts,
} from "../../workers/durable-objects/job-events/postgres-facts";
import type { IngestResult } from "../../workers/durable-objects/rpc";
import type { TenantStreamsObject } from "../../workers/durable-objects/tenant-streams/tenant-streams-object";
import type { Env } from "../../workers/env";

/** A batch as a host builds it, before its mac. */
export type HostBatch = Omit<IngestBatch, "mac">;

/** What the fake Postgres holds for one job. */
export interface FakeJobRow {
  /** The job row the projector reads; an Error makes the read fail. */
  facts: JobStateFacts | Error | null;
  /** Set by a test that decides the row itself: host terminal events then no longer write it. */
  explicit: boolean;
  /** Job ids the projector asked about, one per read. */
  asked: string[];
  executions: Map<string, ExecutionFacts & { token: string }>;
  /**
   * What the executions history read answers (the job's executions by epoch, with their journal
   * `recovered` rows); empty unless a test sets it. An Error makes the read fail.
   */
  history: ExecutionHistoryEntry[] | Error;
  /** How many times the projector read the history. */
  historyReads: number;
}

const fakePostgres = new Map<string, FakeJobRow>();

export function fakeRow(jobId: string): FakeJobRow {
  let row = fakePostgres.get(jobId);
  if (!row) {
    row = { facts: null, explicit: false, asked: [], executions: new Map(), history: [], historyReads: 0 };
    fakePostgres.set(jobId, row);
  }
  return row;
}

/** Point the job's object at the fake Postgres (again after an eviction: a new instance has the real lookups). */
export async function useFakePostgres(stub: DurableObjectStub<JobEventsObject>, jobId: string): Promise<FakeJobRow> {
  const row = fakeRow(jobId);
  await runInDurableObject(stub, (instance: JobEventsObject) => {
    const marked = instance as unknown as { usesFakePostgres?: boolean };
    if (marked.usesFakePostgres) return;
    marked.usesFakePostgres = true;
    instance.trust.lookup = async (j, e) => {
      const x = fakePostgres.get(j)?.executions.get(e);
      return x ? { epoch: x.epoch, token: x.token } : null;
    };
    instance.firsts.history = async (j) => {
      const r = fakePostgres.get(j);
      if (!r) return [];
      r.historyReads++;
      if (r.history instanceof Error) throw r.history;
      return r.history;
    };
    instance.terminal.jobState = async (j) => {
      const r = fakePostgres.get(j);
      r?.asked.push(j);
      if (r?.facts instanceof Error) throw r.facts;
      return r?.facts ?? null;
    };
  });
  return row;
}

/** The test decides what Postgres says about the job's row from now on. */
export async function setJobRow(
  stub: DurableObjectStub<JobEventsObject>,
  jobId: string,
  facts: JobStateFacts | Error | null,
): Promise<FakeJobRow> {
  const row = await useFakePostgres(stub, jobId);
  row.facts = facts;
  row.explicit = true;
  row.asked = [];
  return row;
}

/** The execution a host started (its executions row), with a fresh claim token. */
export function startExecution(jobId: string, executionId: string, epoch: number): string {
  const row = fakeRow(jobId);
  const known = row.executions.get(executionId);
  if (known) return known.token;
  const token = crypto.randomUUID();
  row.executions.set(executionId, { epoch, token });
  if (!row.explicit && row.facts === null) row.facts = facts(executionId, epoch, "running");
  return token;
}

const STATE_OF: Record<string, JobState> = {
  "run.completed": "completed",
  "run.failed": "failed",
  "run.cancelled": "cancelled",
  "run.lost": "lost",
  "run.timed_out": "timed_out",
};

function facts(executionId: string, epoch: number, state: JobState, last?: EventEnvelope): JobStateFacts {
  const now = new Date();
  const error = last?.payload.error as JobStateFacts["error"] | undefined;
  return {
    state,
    executionId,
    epoch,
    output: typeof last?.payload.output === "string" ? last.payload.output : null,
    error: error ?? null,
    finishedAt: last ? now : null,
    startedAt: now,
  };
}

const hex = (buf: ArrayBuffer) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, "0")).join("");

/**
 * A batch's mac, computed here independently of src/domain/signing.ts so the tests pin the
 * derivation: K = HMAC-SHA256(token, "ear-ingest-v1:" + execution_id), mac = HMAC-SHA256(K,
 * nonce + "\n" + job_id + "\n" + JSON.stringify(events)).
 */
export async function macOf(token: string, executionId: string, nonce: string, jobId: string, eventsJson: string) {
  const enc = new TextEncoder();
  const key = (raw: Uint8Array) =>
    crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const k = await crypto.subtle.sign("HMAC", await key(enc.encode(token)), enc.encode(`ear-ingest-v1:${executionId}`));
  return hex(
    await crypto.subtle.sign("HMAC", await key(new Uint8Array(k)), enc.encode(`${nonce}\n${jobId}\n${eventsJson}`)),
  );
}

/**
 * Sign a batch as its host would: the execution is registered as started (fake executions row)
 * and, when the batch carries a terminal event, the row is made terminal first — a real host
 * writes Postgres before it emits its terminal event — unless the test set the row itself.
 */
export async function signBatch(b: HostBatch, nonce: string, token?: string): Promise<IngestBatch> {
  const first = b.events[0] as EventEnvelope;
  const own = startExecution(b.job_id, first.execution_id, first.epoch);
  const row = fakeRow(b.job_id);
  const terminal = b.events.find((e) => STATE_OF[e.type] !== undefined);
  if (terminal && !row.explicit && !(row.facts && !(row.facts instanceof Error) && row.facts.finishedAt)) {
    row.facts = facts(terminal.execution_id, terminal.epoch, STATE_OF[terminal.type] as JobState, terminal);
  }
  const mac = await macOf(token ?? own, first.execution_id, nonce, b.job_id, JSON.stringify(b.events));
  return { ...b, mac };
}

/**
 * The bindings with the namespaces typed by the classes, so a test can reach into an instance
 * (runInDurableObject); the Worker itself sees only the RPC interfaces (workers/durable-objects/rpc.ts).
 */
export const testEnv = env as unknown as Omit<Env, "JOB_EVENTS" | "CHAT_SESSIONS" | "TENANT_STREAMS"> & {
  JOB_EVENTS: DurableObjectNamespace<JobEventsObject>;
  CHAT_SESSIONS: DurableObjectNamespace<ChatSessionObject>;
  TENANT_STREAMS: DurableObjectNamespace<TenantStreamsObject>;
  INTERNAL_SIGNING_SECRET: string;
};

export function jobStub(jobId: string): DurableObjectStub<JobEventsObject> {
  return testEnv.JOB_EVENTS.get(testEnv.JOB_EVENTS.idFromName(jobId));
}

export function newJob(): { jobId: string; stub: DurableObjectStub<JobEventsObject> } {
  const jobId = crypto.randomUUID();
  return { jobId, stub: jobStub(jobId) };
}

export function envelope(
  jobId: string,
  executionId: string,
  epoch: number,
  seq: number,
  type: EventType = "model.delta",
  payload: Record<string, unknown> = { text: `t${seq}` },
): EventEnvelope {
  // Deliberately any payload: these tests hand the object malformed and forged events over RPC,
  // which (unlike the gateway's ingest route) does not validate them.
  return {
    job_id: jobId,
    execution_id: executionId,
    epoch,
    seq,
    type,
    payload,
    ts: new Date().toISOString(),
  } as EventEnvelope;
}

/** `seqs` of one execution, all model deltas. */
export function batch(jobId: string, executionId: string, epoch: number, seqs: number[]): HostBatch {
  return { job_id: jobId, events: seqs.map((s) => envelope(jobId, executionId, epoch, s)) };
}

/** Ingest `b` as its host would (signed with its execution's token) over RPC. */
export async function ingest(
  stub: DurableObjectStub<JobEventsObject>,
  b: HostBatch,
  nonce: string = crypto.randomUUID(),
): Promise<IngestResult> {
  await useFakePostgres(stub, b.job_id);
  const signed = await signBatch(b, nonce);
  return (await stub.ingest(signed, nonce, JSON.stringify(signed.events))) as IngestResult;
}

export async function offsets(stub: DurableObjectStub<JobEventsObject>, after = 0) {
  const rows = (await stub.readAfter(after)) as Array<{ offset: number; type: string; event: EventEnvelope }>;
  return rows.map((r) => ({
    offset: r.offset,
    type: r.type,
    seq: r.event.seq,
    execution_id: r.event.execution_id,
    payload: r.event.payload as Record<string, unknown>,
  }));
}

export interface SseEvent {
  id: number;
  event: string;
  data: EventEnvelope;
}

/** Reads an SSE body frame by frame; comments (keepalives) are counted and `retry:` kept, not returned. */
export class SseReader {
  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  private readonly decoder = new TextDecoder();
  private buffer = "";
  private ended = false;
  private pending: Promise<ReadableStreamReadResult<Uint8Array>> | undefined;
  comments = 0;
  /** The stream's `retry:` field, once seen. */
  retryMs: number | undefined;

  constructor(response: Response) {
    if (!response.body) throw new Error("response has no body");
    this.reader = response.body.getReader();
  }

  /** The next event, or null once the stream has ended. Rejects after `timeoutMs`. */
  async next(timeoutMs = 2_000): Promise<SseEvent | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const frame = this.takeFrame();
      if (frame) {
        if (frame.split("\n").every((l) => l.startsWith(":"))) {
          this.comments++;
          continue;
        }
        const retry = /^retry: (\d+)$/.exec(frame);
        if (retry) {
          this.retryMs = Number(retry[1]);
          continue;
        }
        return parseFrame(frame);
      }
      if (this.ended) return null;
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new Error("timed out waiting for an SSE frame");
      let timer: ReturnType<typeof setTimeout> | undefined;
      // A read outlives a timed-out `next`, so its chunk is kept for the next call.
      this.pending ??= this.reader.read();
      const chunk = await Promise.race([
        this.pending,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error("timed out waiting for an SSE frame")), remaining);
        }),
      ]).finally(() => {
        if (timer !== undefined) clearTimeout(timer);
      });
      this.pending = undefined;
      if (chunk.done) this.ended = true;
      else this.buffer += this.decoder.decode(chunk.value, { stream: true });
    }
  }

  /** Read `n` events; fails if the stream ends first. */
  async take(n: number): Promise<SseEvent[]> {
    const out: SseEvent[] = [];
    while (out.length < n) {
      const e = await this.next();
      if (!e) throw new Error(`stream ended after ${out.length} of ${n} events`);
      out.push(e);
    }
    return out;
  }

  /** Everything until the stream ends. */
  async rest(): Promise<SseEvent[]> {
    const out: SseEvent[] = [];
    for (let e = await this.next(); e; e = await this.next()) out.push(e);
    return out;
  }

  async cancel(): Promise<void> {
    await this.reader.cancel().catch(() => {});
  }

  private takeFrame(): string | null {
    const end = this.buffer.indexOf("\n\n");
    if (end < 0) return null;
    const frame = this.buffer.slice(0, end);
    this.buffer = this.buffer.slice(end + 2);
    return frame;
  }
}

function parseFrame(frame: string): SseEvent {
  const fields: Record<string, string> = {};
  for (const line of frame.split("\n")) {
    if (line.startsWith(":")) continue;
    const i = line.indexOf(": ");
    if (i < 0) throw new Error(`malformed SSE line: ${line}`);
    fields[line.slice(0, i)] = line.slice(i + 2);
  }
  if (fields.id === undefined || fields.event === undefined || fields.data === undefined) {
    throw new Error(`incomplete SSE frame: ${frame}`);
  }
  return { id: Number(fields.id), event: fields.event, data: JSON.parse(fields.data) };
}

/** The Worker under test (wrangler.toml's main), called in-process. */
export const gateway = (exportsOfMain as unknown as { default: Fetcher }).default;
