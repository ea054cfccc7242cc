/**
 * GET /v1/jobs/:id/events?include=descendants — one SSE stream of a job and every descendant
 * its delegate calls created (and theirs), interleaved in arrival order. Each event is the job's
 * own envelope, so `data.job_id` says whose it is.
 *
 * The cursor is composite: every event's `id` is `t1.` + base64url of `{job id: offset}` for
 * every job of the tree seen so far, covering exactly the events written up to that one. A
 * reconnect with it replays each job from its own offset, so nothing is missed or repeated. We
 * chose this over a merged per-root sequence kept by the root's JobEvents object because each
 * job's log already is the durable, ordered record: a merged sequence would need every child's
 * ingest to be forwarded to (and durably stored again by) the root's object, a second write per
 * event and a cross-object ordering problem. The price is the cursor's size: ~50 bytes per job,
 * at most ~4 KB for the largest tree (DELEGATION_LIMITS: 64 jobs below the root).
 *
 * The gateway joins one JobEvents stream per job: the root's at once, and each child once its
 * parent's stream has delivered the `child.created` that announces it, so a child's events never
 * come before its announcement, even for a client that connects when the tree is already grown
 * (the children found in Postgres at connect wait for their parent's replay to reach them). A
 * child the cursor already holds was announced before it and is followed at once; a child whose
 * announcement never comes (its parent's host died before delivering it) is followed when its
 * parent's stream ends. A child the tree read at connect did not know is followed only once
 * Postgres confirms it is the tenant's job and that job's child. The root's stream holds the
 * tenant's stream slot (one per tree stream); the others are followed uncounted.
 */
import { ApiError, ERROR_STATUS } from "../../src/contracts/errors";
import {
  decodeTreeCursor,
  encodeTreeCursor,
  isCursorJobId,
  SSE_FINISHED_STATUS,
  SSE_RETRY_MS,
  type TreeCursor,
} from "../../src/contracts/sse";
import type { TreeNode } from "../../src/contracts/tree";
import { getTree, isChildOf } from "../../src/db/children-repo";
import type { Db } from "../../src/db/client";
import { SSE_HEADERS } from "../durable-objects/job-events/sse-fanout";
import { log } from "../log";
import type { GatewayEnv } from "../types";

/** A cursor longer than this cannot come from a tree within the delegation limits. */
const MAX_TREE_CURSOR_CHARS = 8_192;
/** A JobEvents object's answer once its log was deleted after the retention. */
const GONE_STATUS = ERROR_STATUS.events_expired;

/** Last-Event-ID (else `after`) as a tree cursor; empty means from the start. Bad input is a 400. */
export function parseTreeCursor(lastEventId: string | undefined, after: string | undefined): TreeCursor {
  const raw = (lastEventId ?? after ?? "").trim();
  if (raw === "" || raw === "0") return {};
  const field = lastEventId !== undefined ? "Last-Event-ID" : "after";
  const cursor = raw.length > MAX_TREE_CURSOR_CHARS ? null : decodeTreeCursor(raw);
  if (cursor === null) {
    throw new ApiError("invalid_request", `${field}: must be an event id of this stream (include=descendants: "t1.…")`);
  }
  return cursor;
}

/** Every job of the tree, root first, each with its parent (null for the root). */
function treeJobs(node: TreeNode, parent: string | null = null, out: Array<[string, string | null]> = []) {
  out.push([node.id, parent]);
  for (const c of node.children) treeJobs(c, node.id, out);
  return out;
}

interface Frame {
  id: string | null;
  event: string | null;
  data: string | null;
  comment: boolean;
}

/** The frames of an SSE body, as they arrive (our JobEvents objects write `\n` line ends). */
async function* frames(body: ReadableStream<Uint8Array>): AsyncGenerator<Frame> {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    for (let end = buf.indexOf("\n\n"); end >= 0; end = buf.indexOf("\n\n")) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const f: Frame = { id: null, event: null, data: null, comment: false };
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) f.comment = true;
        else if (line.startsWith("id: ")) f.id = line.slice(4);
        else if (line.startsWith("event: ")) f.event = line.slice(7);
        else if (line.startsWith("data: ")) f.data = f.data === null ? line.slice(6) : `${f.data}\n${line.slice(6)}`;
      }
      yield f;
    }
  }
}

const encoder = new TextEncoder();

/**
 * The merged stream. Every job's first request is made before answering, so a finished tree
 * with nothing after the cursor answers 204 (the status that stops an EventSource) like a
 * single job's stream does.
 */
export async function treeEventStream(
  env: GatewayEnv["Bindings"],
  db: Db,
  tenantId: string,
  rootId: string,
  cursor: TreeCursor,
  counted: string,
): Promise<Response> {
  const tree = await getTree(db, tenantId, rootId);
  if (!tree) throw new ApiError("not_found", "job not found");
  const state: TreeCursor = { ...cursor };
  const open = (jobId: string) => {
    const stub = env.JOB_EVENTS.get(env.JOB_EVENTS.idFromName(jobId));
    const extra = jobId === rootId ? `&${counted}` : "";
    return stub.fetch(`https://job-events/events?after=${state[jobId] ?? 0}&job_id=${jobId}${extra}`);
  };
  const jobs = treeJobs(tree);
  const first = await Promise.all(jobs.map(([id]) => open(id)));
  // The root's own refusal (the tenant's stream cap, an expired log) is the answer.
  const rootAnswer = first[0] as Response;
  if (!rootAnswer.ok && rootAnswer.status !== SSE_FINISHED_STATUS) {
    for (const r of first.slice(1)) await r.body?.cancel();
    return rootAnswer;
  }
  // A descendant whose log passed the retention (410) has nothing left to replay, like a finished
  // one (204): a child usually finishes before its root, so its log goes first. Counting it as
  // "more to come" answered a finished tree with a 200 that closes at once, which an EventSource
  // reconnects to every `retry:` until the root's own log expires.
  const done = (r: Response, i: number) => r.status === SSE_FINISHED_STATUS || (i > 0 && r.status === GONE_STATUS);
  if (first.every(done)) {
    for (const r of first) await r.body?.cancel();
    return new Response(null, { status: SSE_FINISHED_STATUS });
  }

  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  const writer = writable.getWriter();
  const following = new Set<string>();
  /** Children found at connect that wait for their announcement: child → parent. */
  const unannounced = new Map<string, string>();
  const bodies = new Set<ReadableStream<Uint8Array>>();
  let live = 0;
  let closed = false;
  const stop = () => {
    if (closed) return;
    closed = true;
    for (const b of bodies) b.cancel().catch(() => {});
    writer.close().catch(() => {});
  };
  const write = async (text: string) => {
    if (closed) return;
    try {
      await writer.write(encoder.encode(text));
    } catch {
      stop(); // the client went away: stop following every job
    }
  };
  const follow = (jobId: string, response: Response | Promise<Response>) => {
    if (following.has(jobId)) return;
    following.add(jobId);
    live++;
    void (async () => {
      try {
        const res = await response;
        if (res.status !== 200 || !res.body) {
          if (res.status !== SSE_FINISHED_STATUS && res.status !== GONE_STATUS)
            log.warn("descendant stream refused", { jobId, status: res.status });
          await res.body?.cancel();
          return;
        }
        bodies.add(res.body);
        for await (const f of frames(res.body)) {
          if (closed) break;
          if (f.comment) {
            await write(": keepalive\n\n");
            continue;
          }
          if (f.id === null || f.event === null || f.data === null) continue;
          const offset = Number(f.id);
          if (!(offset > (state[jobId] ?? 0))) continue;
          // Updated right before its frame is queued: the cursor in each frame covers exactly the
          // frames queued before it, whichever job they came from.
          state[jobId] = offset;
          const child =
            f.event === "child.created"
              ? (JSON.parse(f.data) as { payload?: { job_id?: unknown } }).payload?.job_id
              : undefined;
          // The announced child enters the cursor (at offset 0) with its announcement, so a
          // reconnect from here or later follows it at once instead of waiting for a replay
          // that the cursor has already passed.
          if (typeof child === "string" && isCursorJobId(child)) state[child] ??= 0;
          await write(`id: ${encodeTreeCursor(state)}\nevent: ${f.event}\ndata: ${f.data}\n\n`);
          if (typeof child === "string" && !following.has(child)) {
            // A child the tree read at connect found under this job is known to be the tenant's.
            if (unannounced.get(child) === jobId) {
              unannounced.delete(child);
              follow(child, open(child));
            } else void join(jobId, child);
          }
        }
      } catch (err) {
        if (!closed) log.warn("descendant stream failed", { jobId, error: err });
      } finally {
        // Children this stream never announced (their parent's host died before delivering it)
        // are followed now rather than never.
        for (const [child, parent] of unannounced) {
          if (parent !== jobId || closed) continue;
          unannounced.delete(child);
          follow(child, open(child));
        }
        live--;
        if (live === 0) stop();
      }
    })();
  };
  /**
   * Follow a child a `child.created` of `parentId` names, once Postgres says it is the tenant's
   * and that job's child. If Postgres cannot answer, the stream ends: the client reconnects with
   * its cursor and the reconnect's tree read finds the child, so nothing is lost.
   */
  const join = async (parentId: string, child: string) => {
    live++; // held while the check runs, so the stream cannot end before the child is followed
    try {
      if (await isChildOf(db, tenantId, child, parentId)) follow(child, open(child));
      else log.warn("child.created names a job that is not this job's child", { jobId: parentId, child });
    } catch (err) {
      log.warn("cannot check a child of the tree; ending the stream for a reconnect", { jobId: parentId, error: err });
      stop();
    } finally {
      live--;
      if (live === 0) stop();
    }
  };
  // Not awaited: nothing reads the stream before the response is returned. Writes keep their order.
  void write(`retry: ${SSE_RETRY_MS}\n\n`);
  // All the waiting children are known before any stream is read, so an announcement always finds its child here.
  for (const [id, parent] of jobs) if (parent !== null && cursor[id] === undefined) unannounced.set(id, parent);
  for (const [i, [id]] of jobs.entries()) {
    const res = first[i] as Response;
    if (unannounced.has(id)) res.body?.cancel().catch(() => {});
    else follow(id, res);
  }
  return new Response(readable, { headers: SSE_HEADERS });
}
