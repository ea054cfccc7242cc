/**
 * The client's event-stream resume (src/client/events.ts) against a stream cut at every byte
 * offset of a recorded response (fixtures/job-events.sse: a live job's stream as the gateway
 * sent it, recorded on the dev stack with the mock model at 12 tokens/s and SSE_HEARTBEAT_MS=150,
 * so keepalive comments sit between the frames and multi-byte characters inside them): whatever the cut, the events come out once each, in order,
 * with no gap, and the reconnect asks for exactly what is missing (Last-Event-ID). The "server"
 * is a fetch function that serves the recorded frames after the requested id, as the JobEvents
 * object does; timers are faked so the server's `retry: 1000` costs no real time.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { EarClient } from "../../src/client/client";
import type { StreamedEvent } from "../../src/client/events";
import { ApiClientError } from "../../src/client/http";

const RECORDED = new Uint8Array(readFileSync(join(import.meta.dirname, "fixtures/job-events.sse")));
const text = new TextDecoder().decode(RECORDED);
/** The recorded response's blocks: the `retry:` line, comments and frames, each with its blank line. */
const blocks = text.split(/(?<=\n\n)/);
const frames = blocks
  .filter((b) => b.startsWith("id: "))
  .map((b) => ({ id: Number(/^id: (\d+)/.exec(b)?.[1]), block: b }));
const ALL_IDS = frames.map((f) => f.id);
const encoder = new TextEncoder();

/** The recorded server's answer for a cursor: the preamble, then the frames after it. */
function responseAfter(after: number): Uint8Array {
  if (after > 0 && after >= (ALL_IDS.at(-1) ?? 0)) return new Uint8Array();
  if (after === 0) return RECORDED;
  return encoder.encode(
    blocks.filter((b) => !b.startsWith("id: ") || Number(/^id: (\d+)/.exec(b)?.[1]) > after).join(""),
  );
}

type Ending = "close" | "error";

function body(bytes: Uint8Array, splits: number[], ending: Ending | null): ReadableStream<Uint8Array> {
  const points = [0, ...splits.filter((s) => s > 0 && s < bytes.length), bytes.length];
  let i = 0;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (i < points.length - 1) {
        controller.enqueue(bytes.slice(points[i], points[i + 1]));
        i++;
        return;
      }
      if (ending === "error") controller.error(new TypeError("terminated: other side closed"));
      else controller.close();
    },
  });
}

interface Served {
  lastEventId: string | null;
}

/** A fetch that cuts its first answer after `cut` bytes (ending it as `ending`) and serves later ones whole. */
function cuttingServer(cut: number, ending: Ending, splitFirstAt: number[] = []) {
  const served: Served[] = [];
  const fetchImpl = async (_url: string | URL | Request, init?: RequestInit) => {
    const headers = new Headers(init?.headers);
    const lastEventId = headers.get("last-event-id");
    served.push({ lastEventId });
    const after = Number(lastEventId ?? "0");
    const full = responseAfter(after);
    if (full.length === 0 && after > 0) return new Response(null, { status: 204 });
    if (served.length === 1) {
      return new Response(body(full.slice(0, cut), splitFirstAt, ending), {
        headers: { "content-type": "text/event-stream" },
      });
    }
    return new Response(body(full, [], "close"), { headers: { "content-type": "text/event-stream" } });
  };
  return { served, fetchImpl: fetchImpl as typeof fetch };
}

async function drain(iterable: AsyncIterable<StreamedEvent>): Promise<StreamedEvent[]> {
  const out: StreamedEvent[] = [];
  const done = (async () => {
    for await (const e of iterable) out.push(e);
  })();
  let settled = false;
  done.then(
    () => (settled = true),
    () => (settled = true),
  );
  // Run the reconnect timers as they come, until the iterator is finished.
  for (let i = 0; i < 1000 && !settled; i++) await vi.advanceTimersByTimeAsync(1000);
  await done;
  return out;
}

/** Complete frames within the first `cut` bytes: what the client must have yielded before the cut. */
function completeFramesWithin(cut: number): number {
  const prefix = new TextDecoder().decode(RECORDED.slice(0, cut));
  let count = 0;
  for (const f of frames) {
    const at = prefix.indexOf(f.block);
    if (at >= 0) count++;
  }
  return count;
}

describe("client events: resume through a cut at every byte offset", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("the recorded response is a whole stream: a retry field, a comment, frames 1..N ending in a terminal event", () => {
    expect(text.startsWith("retry: 1000\n\n")).toBe(true);
    expect(text).toContain(": keepalive\n\n");
    expect(ALL_IDS).toEqual(Array.from({ length: ALL_IDS.length }, (_, i) => i + 1));
    expect(frames.at(-1)?.block).toMatch(/^id: \d+\nevent: run\.completed\n/);
    // Multi-byte characters, so some cuts fall inside a character.
    expect(RECORDED.length).toBeGreaterThan(text.length);
  });

  for (const ending of ["close", "error"] as const) {
    it(`every cut, the connection ${ending === "close" ? "closed cleanly" : "reset"}: each event once, in order, resumed from the last complete frame`, async () => {
      for (let cut = 0; cut < RECORDED.length; cut++) {
        const { served, fetchImpl } = cuttingServer(cut, ending, [Math.floor(cut / 2), cut - 1]);
        const client = new EarClient({ baseUrl: "http://gateway.test", credential: "tok", fetch: fetchImpl });
        const events = await drain(client.events("7c9e6679-7425-40de-944b-e07fc1f90ae7"));
        expect(
          events.map((e) => e.id),
          `cut at byte ${cut}`,
        ).toEqual(ALL_IDS);
        expect(events.map((e) => e.event.seq)).toEqual(ALL_IDS);
        const before = completeFramesWithin(cut);
        if (before === ALL_IDS.length) {
          // The terminal frame arrived before the cut: no reconnect at all.
          expect(served, `cut at byte ${cut}`).toHaveLength(1);
        } else {
          expect(served, `cut at byte ${cut}`).toHaveLength(2);
          expect(served[1]?.lastEventId ?? null, `cut at byte ${cut}`).toBe(before === 0 ? null : String(before));
        }
      }
    }, 120_000);
  }

  it("the text survives byte-at-a-time delivery (characters split across chunks)", async () => {
    const everyByte = Array.from({ length: RECORDED.length }, (_, i) => i);
    const { served, fetchImpl } = cuttingServer(RECORDED.length, "close", everyByte);
    const client = new EarClient({ baseUrl: "http://gateway.test", fetch: fetchImpl });
    const events = await drain(client.events("j"));
    expect(served).toHaveLength(1);
    const deltas = events
      .filter((e) => e.event.type === "model.delta")
      .map((e) => (e.event.payload as { text: string }).text);
    expect(deltas.join("")).toBe("Bonjour, naïve café 🚀 — «héllo» 日本語 ✓ done.");
  });
});

describe("client events: how a stream ends", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("a 204 on reconnect ends the iterator (finished job, nothing after the cursor)", async () => {
    const requests: Array<string | null> = [];
    const three = encoder.encode(
      `retry: 1000\n\n${frames
        .slice(0, 3)
        .map((f) => f.block)
        .join("")}`,
    ); // no terminal
    const fetchImpl = (async (_u: unknown, init?: RequestInit) => {
      requests.push(new Headers(init?.headers).get("last-event-id"));
      if (requests.length === 1) return new Response(body(three, [], "close"));
      return new Response(null, { status: 204 });
    }) as typeof fetch;
    const events = await drain(new EarClient({ baseUrl: "http://g", fetch: fetchImpl }).events("j"));
    expect(events.map((e) => e.id)).toEqual([1, 2, 3]);
    expect(requests).toEqual([null, "3"]);
  });

  it("waits the server's retry: before reconnecting, and no request follows the terminal event", async () => {
    const at: number[] = [];
    const fetchImpl = (async (_u: unknown, init?: RequestInit) => {
      at.push(Date.now());
      const after = Number(new Headers(init?.headers).get("last-event-id") ?? 0);
      const bytes = after === 0 ? encoder.encode(`retry: 2500\n\n${frames[0]?.block}`) : responseAfter(after);
      return new Response(body(bytes, [], "close"));
    }) as typeof fetch;
    const events = await drain(new EarClient({ baseUrl: "http://g", fetch: fetchImpl }).events("j"));
    expect(events.map((e) => e.id)).toEqual(ALL_IDS);
    expect(at).toHaveLength(2);
    expect((at[1] ?? 0) - (at[0] ?? 0)).toBeGreaterThanOrEqual(2500);
  });

  it("drops an id it already yielded, even if the server repeats it", async () => {
    let n = 0;
    const fetchImpl = (async () => {
      n++;
      // The server (wrongly) ignores the cursor and replays everything on the second connection.
      const firstTwo = encoder.encode(
        frames
          .slice(0, 2)
          .map((f) => f.block)
          .join(""),
      );
      return new Response(body(n === 1 ? firstTwo : RECORDED, [], "close"));
    }) as typeof fetch;
    const events = await drain(new EarClient({ baseUrl: "http://g", fetch: fetchImpl }).events("j"));
    expect(events.map((e) => e.id)).toEqual(ALL_IDS);
  });

  it("a 401 is thrown as the API's error; a 503 with Retry-After is retried after it", async () => {
    const unauthorized = (async () =>
      Response.json({ error: { code: "unauthorized", message: "invalid token" } }, { status: 401 })) as typeof fetch;
    const err = await drain(new EarClient({ baseUrl: "http://g", fetch: unauthorized }).events("j")).catch((e) => e);
    expect(err).toBeInstanceOf(ApiClientError);
    expect(err).toMatchObject({ status: 401, code: "unauthorized" });

    const at: number[] = [];
    const busy = (async () => {
      at.push(Date.now());
      if (at.length === 1) {
        return Response.json(
          { error: { code: "dependency_unavailable", message: "busy" } },
          { status: 503, headers: { "retry-after": "4" } },
        );
      }
      return new Response(body(RECORDED, [], "close"));
    }) as typeof fetch;
    const events = await drain(new EarClient({ baseUrl: "http://g", fetch: busy }).events("j"));
    expect(events.map((e) => e.id)).toEqual(ALL_IDS);
    expect((at[1] ?? 0) - (at[0] ?? 0)).toBeGreaterThanOrEqual(4000);
  });
});
