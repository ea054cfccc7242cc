/** Shared helpers for the workerd tests: typed env, envelope builders and an SSE reader. */
import { env, exports as exportsOfMain } from "cloudflare:workers";
import type { EventEnvelope, EventType, IngestBatch } from "../../src/contracts";
import type { IngestResult, JobEventsObject } from "../../workers/durable-objects/job-events";
import type { Env } from "../../workers/env";

export const testEnv = env as unknown as Env & { INTERNAL_SIGNING_SECRET: string };

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
  return { job_id: jobId, execution_id: executionId, epoch, seq, type, payload, ts: new Date().toISOString() };
}

/** `seqs` of one execution, all model deltas. */
export function batch(jobId: string, executionId: string, epoch: number, seqs: number[]): IngestBatch {
  return { job_id: jobId, events: seqs.map((s) => envelope(jobId, executionId, epoch, s)) };
}

export async function ingest(
  stub: DurableObjectStub<JobEventsObject>,
  b: IngestBatch,
  nonce: string = crypto.randomUUID(),
): Promise<IngestResult> {
  return (await stub.ingest(b, nonce)) as IngestResult;
}

export async function offsets(stub: DurableObjectStub<JobEventsObject>, after = 0) {
  const rows = (await stub.readAfter(after)) as Array<{ offset: number; type: string; event: EventEnvelope }>;
  return rows.map((r) => ({ offset: r.offset, type: r.type, seq: r.event.seq, execution_id: r.event.execution_id }));
}

export interface SseEvent {
  id: number;
  event: string;
  data: EventEnvelope;
}

/** Reads an SSE body frame by frame; comments (keepalives) are counted, not returned. */
export class SseReader {
  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  private readonly decoder = new TextDecoder();
  private buffer = "";
  private ended = false;
  private pending: Promise<ReadableStreamReadResult<Uint8Array>> | undefined;
  comments = 0;

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
