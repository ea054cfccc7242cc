/**
 * A lease holder frozen past its lease must make no model call under it after it wakes (another
 * holder may have its slot by then): the call is stopped, and the turn is asked again under a
 * new lease (docs/capacity.md, "A lost lease retries the turn"). One run, on a quiet stack:
 *
 *  1. its first model turn is in flight (the mock holds the answer back `ttft_ms`), so its host
 *     holds a lease on the model key;
 *  2. the harness SIGSTOPs that host, then appends an input to the run through the API: the
 *     run takes one more model turn for it (runner/agent-loop.ts applies input at turn
 *     boundaries);
 *  3. it waits until the mock has written the whole first answer into the frozen host's socket
 *     and, on the Redis server's clock, the lease is older than the lease timeout;
 *  4. SIGCONT. The host finds the buffered answer and its due timers at once.
 *
 * Expected: the buffered answer is discarded (it came under the lost lease); the frozen holder
 * never reappears in the lease ZSET while a new holder of the same execution does; the mock's
 * request log (the run is identified by a marker in its prompt, which every turn repeats) holds
 * 3 requests: the first, the turn asked again, and the input's turn; the stream's `model.turn`
 * reasons are `start`, `lease_lost`, `input`, and the run ends `completed`.
 */
import { randomUUID } from "node:crypto";
import type { Redis as IORedis } from "ioredis";
import type pg from "pg";
import { sleep } from "../../src/domain/async";
import { readSse } from "../lib/sse";
import type { MockModelControl } from "../mock-model/remote";
import type { HostHandle, Stack } from "../stack/start";
import { signalHost } from "./bundled-host";

export interface StopCheckReport {
  jobId: string;
  host: string;
  /** SIGSTOP → SIGCONT, on the Redis server's clock. */
  frozenMs: number;
  /** At SIGCONT: server time minus the lease's last renewal (null: already purged from the ZSET). */
  leaseAgeAtContMs: number | null;
  leaseTimeoutMs: number;
  /** Model requests carrying this run's marker: before SIGCONT, and once the run had ended. */
  requestsBeforeCont: number;
  /**
   * The frozen lease's holder; whether its score moved after SIGCONT (renewed or re-admitted:
   * an expired lease held again); the execution's other holders seen in the ZSET after SIGCONT.
   */
  frozenHolder: string;
  frozenHeldAgain: boolean;
  holdersAfterCont: string[];
  /** The `reason` of each `model.turn` on the stream, in order. */
  turnReasons: string[];
  requestsAfter: number;
  /** Outcome the mock recorded for the first request (it must have completed while frozen). */
  firstRequestOutcome: string;
  state: string;
  errorCode: string | null;
  /** Event types of the run as a client reads them from the gateway (SSE), in order. */
  events: string[];
  inputStatus: string | null;
}

interface Deps {
  stack: Stack;
  mock: MockModelControl;
  db: pg.Pool;
  redis: IORedis;
  leasesKey: string;
  readyKey: string;
  leaseTimeoutMs: number;
  hosts: () => HostHandle[];
  serverMs: () => Promise<number>;
  log: (line: string) => void;
}

/** A Redis TIME reply ([seconds, microseconds]) in ms: the clock the lease scripts score with. */
export function timeMs(reply: unknown): number {
  const [s, us] = reply as [string | number, string | number];
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

async function until<T>(
  what: string,
  timeoutMs: number,
  probe: () => Promise<T | null | undefined | false>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`stop check: timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}

export async function runStopCheck(d: Deps): Promise<StopCheckReport> {
  const marker = `stop-check-${randomUUID().slice(0, 8)}`;
  const jobId = randomUUID();
  // The first answer is held back 2.5 s: time to see the request arrive and freeze its host
  // while the lease is held, even on a loaded machine (the freeze lasts until the lease expired,
  // ~3 s, either way).
  const prompt = `!mock ${JSON.stringify({ reply: `${marker} first turn`, ttft_ms: 2500, tokens_per_s: 50 })}`;
  await d.db.query("INSERT INTO jobs (id, tenant_id, input) VALUES ($1, $2, $3)", [
    jobId,
    d.stack.tenantId,
    JSON.stringify({ messages: [{ role: "user", content: prompt }] }),
  ]);
  await d.redis.zadd(d.readyKey, Date.now(), jobId);

  const running = await until("the run to start", 20_000, async () => {
    const r = await d.db.query<{ owner: string; execution_id: string }>(
      "SELECT owner, execution_id::text FROM jobs WHERE id = $1 AND state = 'running'",
      [jobId],
    );
    return r.rows[0];
  });
  const holderPrefix = `${running.execution_id}:`;
  await until("its lease and its model request", 10_000, async () => {
    const members = await d.redis.zrange(d.leasesKey, "0", "-1");
    return members.some((m) => m.startsWith(holderPrefix)) && (await d.mock.requests(marker)).length === 1;
  });
  const host = d.hosts().find((h) => h.id === running.owner);
  if (!host) throw new Error(`stop check: host ${running.owner} is not one of ours`);
  const holder = (await d.redis.zrange(d.leasesKey, "0", "-1")).find((m) => m.startsWith(holderPrefix)) as string;

  /** The lease's score (last renewal) and the server's time, read atomically. */
  const leaseScore = async () => {
    const replies = (await d.redis.multi().time().zscore(d.leasesKey, holder).exec()) ?? [];
    const score = replies[1]?.[1] as string | null | undefined;
    return { now: timeMs(replies[0]?.[1]), score: score == null ? null : Number(score) };
  };
  const stoppedAt = await d.serverMs();
  signalHost(host, "SIGSTOP");
  d.log(`stop check: ${host.id} frozen holding ${holder}`);
  let contAt = stoppedAt;
  let leaseAgeAtContMs: number | null = null;
  let requestsBeforeCont = 0;
  let scoreAtCont: number | null = null;
  try {
    // Frozen with the lease still held (not released in the moment before the freeze)?
    if ((await leaseScore()).score === null)
      throw new Error("stop check: the run released its lease before the freeze");
    const input = await fetch(`${d.stack.gatewayUrl}/v1/jobs/${jobId}/input`, {
      method: "POST",
      headers: { authorization: `Bearer ${d.stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ content: `!mock ${JSON.stringify({ reply: `${marker} second turn` })}` }),
    });
    if (input.status >= 300) throw new Error(`stop check: input answered ${input.status}: ${await input.text()}`);
    // The first answer fully written into the frozen host's socket, and the lease expired.
    await until("the first answer to be written", 10_000, async () =>
      (await d.mock.requests(marker)).every((r) => r.outcome !== "in_flight"),
    );
    await until("the lease to expire on the server's clock", d.leaseTimeoutMs + 10_000, async () => {
      const { now, score } = await leaseScore();
      // 200 ms past the timeout: a renewal in flight at the freeze cannot have moved it since.
      return score === null || now - score > d.leaseTimeoutMs + 200;
    });
    requestsBeforeCont = (await d.mock.requests(marker)).length;
    const { now, score } = await leaseScore();
    contAt = now;
    scoreAtCont = score;
    leaseAgeAtContMs = score === null ? null : now - score;
  } finally {
    signalHost(host, "SIGCONT");
  }
  d.log(`stop check: ${host.id} resumed after ${contAt - stoppedAt} ms`);

  // Until the run ends: every holder of this execution in the ZSET (the retry holds its lease for
  // the mock's 2.5 s first-token delay, far longer than this 20 ms poll). The expired member may
  // linger until a script purges it; only a new score would mean it was held again.
  const holdersAfterCont = new Set<string>();
  let frozenHeldAgain = false;
  const final = await until("the run to end", 30_000, async () => {
    const members = await d.redis.zrange(d.leasesKey, "0", "-1", "WITHSCORES");
    for (let i = 0; i + 1 < members.length; i += 2) {
      const [m, score] = [members[i] as string, Number(members[i + 1])];
      if (m === holder) frozenHeldAgain ||= score !== scoreAtCont;
      else if (m.startsWith(holderPrefix)) holdersAfterCont.add(m);
    }
    const r = await d.db.query<{ state: string; error: { code?: string } | null }>(
      "SELECT state, error FROM jobs WHERE id = $1 AND state NOT IN ('queued', 'running')",
      [jobId],
    );
    return r.rows[0];
  });
  // Anything the woken host still had queued for the model would have been sent by now.
  await sleep(500);
  const inputs = await d.db.query<{ status: string }>("SELECT status FROM job_inputs WHERE job_id = $1", [jobId]);
  const events: string[] = [];
  const turnReasons: string[] = [];
  try {
    for await (const ev of readSse(`${d.stack.gatewayUrl}/v1/jobs/${jobId}/events`, {
      headers: { authorization: `Bearer ${d.stack.apiKey}` },
      signal: AbortSignal.timeout(15_000),
    })) {
      events.push(ev.event);
      if (ev.event === "model.turn")
        turnReasons.push((JSON.parse(ev.data) as { payload: { reason: string } }).payload.reason);
      if (ev.event.startsWith("run.") && !["run.started", "run.prepared"].includes(ev.event)) break;
    }
  } catch (err) {
    d.log(`stop check: event stream ended early: ${err}`);
  }
  return {
    jobId,
    host: host.id,
    frozenMs: contAt - stoppedAt,
    leaseAgeAtContMs,
    leaseTimeoutMs: d.leaseTimeoutMs,
    requestsBeforeCont,
    requestsAfter: (await d.mock.requests(marker)).length,
    frozenHolder: holder,
    frozenHeldAgain,
    holdersAfterCont: [...holdersAfterCont],
    turnReasons,
    firstRequestOutcome: (await d.mock.requests(marker))[0]?.outcome ?? "none",
    state: final.state,
    errorCode: final.error?.code ?? null,
    events,
    inputStatus: inputs.rows[0]?.status ?? null,
  };
}
