/**
 * The client's tree stream (`events(id, { descendants: true })`, src/client/events.ts) against a
 * fetch that serves a root and its child as the gateway's tree stream does
 * (workers/routes/tree-events.ts): each frame's id the composite cursor after it, a reconnect
 * replaying each job after its own offset in the cursor sent back. Whatever frame the first
 * connection is cut after, every event comes out once, in order, and the reconnect sends the last
 * cursor yielded; the stream ends once every job its cursor holds has ended, not at the first
 * terminal event; a frame resent for a job at or below what was yielded is dropped.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { EarClient } from "../../src/client/client";
import type { TreeStreamedEvent } from "../../src/client/events";
import { decodeTreeCursor, encodeTreeCursor, type TreeCursor } from "../../src/contracts/sse";

const ROOT = "00000000-0000-4000-8000-00000000000a";
const CHILD = "00000000-0000-4000-8000-00000000000b";

interface Ev {
  job: string;
  offset: number;
  type: string;
}

/** A delegation: the root announces its child, the child runs and ends, then the root answers. */
const TREE: Ev[] = [
  { job: ROOT, offset: 1, type: "run.started" },
  { job: ROOT, offset: 2, type: "child.created" },
  { job: CHILD, offset: 1, type: "run.started" },
  { job: CHILD, offset: 2, type: "model.delta" },
  { job: ROOT, offset: 3, type: "run.suspended" },
  { job: CHILD, offset: 3, type: "run.completed" },
  { job: ROOT, offset: 4, type: "run.resumed" },
  { job: ROOT, offset: 5, type: "run.completed" },
];

function envelope(e: Ev): string {
  const payload = e.type === "child.created" ? { job_id: CHILD } : {};
  return JSON.stringify({ job_id: e.job, execution_id: "x", epoch: 1, seq: e.offset, type: e.type, payload, ts: "t" });
}

/** The frames after `cursor`, each with the cursor the gateway would write: what it would stream. */
function framesAfter(events: Ev[], cursor: TreeCursor): string[] {
  const state: TreeCursor = { ...cursor };
  const out: string[] = [];
  for (const e of events) {
    if (e.offset <= (state[e.job] ?? 0)) continue;
    state[e.job] = e.offset;
    if (e.type === "child.created") state[CHILD] ??= 0;
    out.push(`id: ${encodeTreeCursor(state)}\nevent: ${e.type}\ndata: ${envelope(e)}\n\n`);
  }
  return out;
}

function server(events: Ev[], opts: { cutAfter?: number; resend?: boolean } = {}) {
  const requests: Array<{ url: string; lastEventId: string | null }> = [];
  const fetchImpl = (async (url: string, init?: RequestInit) => {
    const lastEventId = new Headers(init?.headers).get("last-event-id");
    requests.push({ url, lastEventId });
    const cursor = lastEventId === null ? {} : (decodeTreeCursor(lastEventId) ?? {});
    let frames = framesAfter(events, cursor);
    if (frames.length === 0) return new Response(null, { status: 204 });
    // A server that resends the whole tree ignores the cursor: the client must drop what it had.
    if (opts.resend && requests.length > 1) frames = framesAfter(events, {});
    if (requests.length === 1 && opts.cutAfter !== undefined) frames = frames.slice(0, opts.cutAfter);
    return new Response(`retry: 1000\n\n${frames.join("")}`, { headers: { "content-type": "text/event-stream" } });
  }) as unknown as typeof fetch;
  return { requests, api: new EarClient({ baseUrl: "http://g.test", credential: "k", fetch: fetchImpl }) };
}

async function drain(it: AsyncIterable<TreeStreamedEvent>): Promise<TreeStreamedEvent[]> {
  const out: TreeStreamedEvent[] = [];
  let settled = false;
  const done = (async () => {
    for await (const e of it) out.push(e);
  })().finally(() => {
    settled = true;
  });
  for (let i = 0; i < 100 && !settled; i++) await vi.advanceTimersByTimeAsync(1000);
  await done;
  return out;
}

const seq = (evs: TreeStreamedEvent[]) => evs.map((e) => `${e.event.job_id.slice(-1)}${e.event.seq}:${e.event.type}`);
const EXPECTED = TREE.map((e) => `${e.job.slice(-1)}${e.offset}:${e.type}`);

describe("client tree events (include=descendants)", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("asks for the tree stream and ends at the last job's end, with no extra request", async () => {
    const { api, requests } = server(TREE);
    const got = await drain(api.events(ROOT, { descendants: true }));
    expect(seq(got)).toEqual(EXPECTED);
    expect(requests).toEqual([{ url: `http://g.test/v1/jobs/${ROOT}/events?include=descendants`, lastEventId: null }]);
    expect(decodeTreeCursor(got.at(-1)?.id ?? "")).toEqual({ [ROOT]: 5, [CHILD]: 3 });
  });

  it("a cut after any frame resumes with the last cursor yielded: every event once, in order", async () => {
    for (let cut = 0; cut < TREE.length; cut++) {
      const { api, requests } = server(TREE, { cutAfter: cut });
      const got = await drain(api.events(ROOT, { descendants: true }));
      expect(seq(got), `cut after ${cut}`).toEqual(EXPECTED);
      expect(requests, `cut after ${cut}`).toHaveLength(2);
      expect(requests[1]?.lastEventId ?? null).toBe(cut === 0 ? null : (got[cut - 1]?.id ?? null));
    }
  });

  it("does not stop at the root's end while a job its cursor holds still runs", async () => {
    // The root ends first (a cancel's cascade can order them so): the child's end still comes.
    const rootFirst = [...TREE.slice(0, 4), TREE[7] as Ev, TREE[5] as Ev];
    const { api } = server(rootFirst);
    const got = await drain(api.events(ROOT, { descendants: true }));
    expect(seq(got).at(-1)).toBe("b3:run.completed");
    expect(got).toHaveLength(6);
  });

  it("drops a frame whose job's offset was already yielded, and starts after a given cursor", async () => {
    const { api } = server(TREE, { cutAfter: 5, resend: true });
    expect(seq(await drain(api.events(ROOT, { descendants: true })))).toEqual(EXPECTED);
    const { api: again, requests } = server(TREE);
    const after = encodeTreeCursor({ [ROOT]: 3, [CHILD]: 2 });
    const rest = await drain(again.events(ROOT, { descendants: true, after }));
    expect(seq(rest)).toEqual(EXPECTED.slice(5));
    expect(requests[0]?.lastEventId).toBe(after);
  });
});
