/**
 * The global model quota under crashes. Real sandbox-host processes share one
 * model quota (limit L) in one Redis; the mock model's concurrency cap is the same L and it
 * answers 429 past it, as a provider would. `runs` jobs are submitted at once, each streaming
 * for a few hundred ms, far more than L can serve together, so runs queue for quota on every
 * host; meanwhile a seeded schedule SIGKILLs hosts that hold leases (each replaced at once).
 *
 * What it measures (quotaViolations() turns it into a verdict):
 *  1. the provider never saw more than L concurrent calls and sent no 429 (mock counters), and
 *     the lease ZSET never held more than L members (sampled every 25 ms);
 *  2. a SIGKILLed holder's slot comes back within lease timeout + one heartbeat. Each victim is
 *     frozen (SIGSTOP) before it is inspected, so the leases it held when it died are exact;
 *     then the harness polls the ZSET (keys from src/quota/keys.ts) in MULTI with TIME, so both
 *     ends are on the Redis server's clock: freeze → first poll that no longer finds the member;
 *  3. a holder SIGSTOPped past its lease makes no model call after SIGCONT (quota-stop-check.ts).
 * Runs on a killed host end `lost` (never re-run: the agent may already have caused side effects); the rest complete.
 */
import { randomUUID } from "node:crypto";
import { resolve } from "node:path";
import { Redis as IORedis } from "ioredis";
import pg from "pg";
import { sleep } from "../../src/domain/async";
import { quotaKeys, redisKeys } from "../../src/quota/keys";
import type { MockStats } from "../mock-model/main";
import type { MockModelControl } from "../mock-model/remote";
import { type HostHandle, type Stack, startStack } from "../stack/start";
import { bundleHost, signalHost, spawnBundledHost } from "./bundled-host";
import { backgroundTasks, mulberry32 } from "./harness";
import { runStopCheck, type StopCheckReport, timeMs } from "./quota-stop-check";

export interface ChaosQuotaOptions {
  runs: number;
  hosts: number;
  kills: number;
  seed: number;
  /** Quota slots for the model. */
  limit: number;
  /** The mock model's concurrency cap, 429 past it (default: the limit). Below it, the 429 check must fire. */
  mockCap?: number;
  /** Run slots per host; hosts × this well above the limit, so every host has runs waiting. */
  maxRunsPerHost: number;
  /** Host heartbeat (leases are renewed on it); lease timeout = 3 × this. */
  heartbeatMs: number;
  /** Each run's scripted answer streams for a duration drawn from [min, max] ms. */
  streamMs: [number, number];
  /** After the load, freeze a holder past its lease (quota-stop-check.ts). */
  stopCheck: boolean;
  /** After the last kill: how long every run gets to end (runs of killed hosts wait for the reaper). */
  recoveryWindowMs: number;
  root?: string;
  log?: (line: string) => void;
}

/** One lease a SIGKILLed host held when it was frozen, and when its slot came back. */
export interface SlotReturn {
  victim: string;
  holder: string;
  /** Freeze minus the lease's last renewal, server clock (negative: a renewal landed after the freeze). */
  renewedBeforeFreezeMs: number;
  /** Freeze → the last poll that still found the member. */
  lastSeenMs: number;
  /** Freeze → the first poll that no longer found it; null if it was never removed while watched. */
  goneByMs: number | null;
  /** Someone needed the slot: it was purged (only an acquire purges), or waiters queued after it expired. */
  contended: boolean;
  /** Freeze → the first poll that saw live waiters (polling) after the lease expired; null if none did. */
  waitedMs: number | null;
}

export interface ChaosQuotaReport {
  seed: number;
  options: Omit<ChaosQuotaOptions, "log" | "root">;
  leaseTimeoutMs: number;
  heartbeatMs: number;
  /** Final state of every run of the load: completed, lost, failed:<code>, … */
  outcomes: Record<string, number>;
  kills: number;
  killsWithoutLease: number;
  hostsSpawned: number;
  /** The mock's counters over the load (reset once all hosts were up). */
  mock: MockStats;
  /** Most members the lease ZSET held at any sample. */
  maxLeasesSeen: number;
  /** Leases younger than the lease timeout once every run had ended (should be none). */
  liveLeasesAtEnd: number;
  slotReturns: SlotReturn[];
  /** Host log lines during the load that reported a lost lease (renewal found it gone, or it ran out locally). */
  leaseLossesReported: number;
  stopCheck: StopCheckReport | null;
  loadMs: number;
  durationMs: number;
}

/** Slack on the slot-return bound for our own observation: poll interval + one poll's round trip. */
export const SLOT_POLL_MS = 20;
export const SLOT_RETURN_TOLERANCE_MS = 250;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export function quotaHostEnv(o: Pick<ChaosQuotaOptions, "limit" | "maxRunsPerHost" | "heartbeatMs">) {
  return {
    HOST_MAX_RUNS: String(o.maxRunsPerHost),
    HOST_HEARTBEAT_MS: String(o.heartbeatMs),
    // 6 heartbeats: past the stop check's freeze (lease timeout + ~0.3 s) plus a heartbeat, so the
    // frozen run is judged by its lease, not reaped as lost; runs of killed hosts end lost after it.
    HOST_RUN_LOST_AFTER_MS: String(6 * o.heartbeatMs),
    HOST_CLAIM_TIMEOUT_MS: "2000",
    HOST_REAP_MS: "300",
    HOST_SWEEP_MS: "500",
    HOST_SWEEP_OLDER_THAN_MS: "500",
    HOST_SHUTDOWN_GRACE_MS: "0",
    HOST_OUTBOX_FLUSH_TIMEOUT_MS: "0",
    QUOTA_MODEL_LIMIT: String(o.limit),
    QUOTA_TENANT_LIMIT: "0",
    // Runs queue behind the kills; none should give up waiting here.
    QUOTA_MAX_WAIT_MS: "120000",
    SANDBOX_ENABLED: "false",
  };
}

const LEASE_LOSS_LINES = ["quota lease lost", "quota lease ran out"];

interface LiveHost {
  handle: HostHandle;
  dead: boolean;
}

export async function runChaosQuota(opts: ChaosQuotaOptions): Promise<ChaosQuotaReport> {
  const t0 = Date.now();
  const log = opts.log ?? (() => {});
  const root = resolve(opts.root ?? process.cwd());
  const rand = mulberry32(opts.seed);
  const leaseTimeoutMs = 3 * opts.heartbeatMs;
  const hosts: LiveHost[] = [];
  const background = backgroundTasks(log);
  const track = background.track;
  let hostsSpawned = 0;
  let leaseLossesReported = 0;

  let stack: Stack | null = null;
  let pool: pg.Pool | null = null;
  let redis: IORedis | null = null;
  try {
    stack = await startStack({
      root,
      hosts: 0,
      mockModel: { maxConcurrency: opts.mockCap ?? opts.limit },
      log: (src, line) => {
        if (src !== "host") log(`[${src}] ${line}`);
      },
    });
    const st = stack;
    const mock = st.mockModel as MockModelControl;
    if (!st.redisUrl) throw new Error("chaos:quota needs the stack's own redis-server");
    const r = new IORedis(st.redisUrl, { maxRetriesPerRequest: 1 });
    redis = r;
    const db = new pg.Pool({ connectionString: st.databaseUrl, max: 4 });
    pool = db;
    const keys = redisKeys();
    const modelKey = quotaKeys.model(st.modelName);
    const leasesKey = keys.quotaLeases(modelKey);
    const seenKey = keys.quotaWaitersSeen(modelKey);
    const readyKey = keys.readyIndex();
    const serverMs = async () => timeMs(await r.time());

    const bundle = await bundleHost(root);
    const env = quotaHostEnv(opts);
    const spawnQuotaHost = async (): Promise<LiveHost> => {
      const handle = await spawnBundledHost(
        bundle,
        st.hostEnv({ ...env, HOST_ID: `quota-${++hostsSpawned}` }),
        (line) => {
          if (LEASE_LOSS_LINES.some((needle) => line.includes(needle))) leaseLossesReported++;
        },
      );
      const h: LiveHost = { handle, dead: false };
      hosts.push(h);
      return h;
    };
    await Promise.all(Array.from({ length: opts.hosts }, () => spawnQuotaHost()));
    log(`${opts.hosts} hosts up after ${Date.now() - t0} ms`);
    await mock.reset();
    leaseLossesReported = 0;

    // --- the load: every run submitted at once -------------------------------------------------
    const ids: string[] = [];
    const inputs: string[] = [];
    const [lo, hi] = opts.streamMs;
    for (let i = 0; i < opts.runs; i++) {
      const ms = lo + Math.floor(rand() * (hi - lo + 1));
      // 8 tokens: the first after 100 ms, the rest spread over the remaining time.
      const script = { reply: `run ${i} w1 w2 w3 w4 w5 w6 w7`, ttft_ms: 100, tokens_per_s: 7000 / (ms - 100) };
      ids.push(randomUUID());
      inputs.push(JSON.stringify({ messages: [{ role: "user", content: `!mock ${JSON.stringify(script)}` }] }));
    }
    const loadStart = Date.now();
    await db.query(
      "INSERT INTO jobs (id, tenant_id, input) SELECT id, $2, input FROM unnest($1::uuid[], $3::jsonb[]) AS t(id, input)",
      [ids, st.tenantId, inputs],
    );
    await r.zadd(readyKey, ...ids.flatMap((id) => [loadStart, id]));

    let maxLeasesSeen = 0;
    let loading = true;
    const sampler = (async () => {
      while (loading) {
        maxLeasesSeen = Math.max(maxLeasesSeen, await r.zcard(leasesKey).catch(() => 0));
        await sleep(25);
      }
    })();

    // --- the kills ----------------------------------------------------------------------------
    const alive = () => hosts.filter((h) => !h.dead);
    /** Lease holders on the model key, by the host that owns each holder's execution. */
    const leasesByHost = async () => {
      const flat = await r.zrange(leasesKey, "0", "-1", "WITHSCORES");
      const leases: Array<{ holder: string; score: number; exec: string }> = [];
      for (let i = 0; i < flat.length; i += 2) {
        const holder = flat[i] as string;
        leases.push({ holder, score: Number(flat[i + 1]), exec: holder.slice(0, holder.lastIndexOf(":")) });
      }
      const execs = leases.map((l) => l.exec).filter((e) => UUID.test(e));
      const owners = await db.query<{ execution_id: string; owner: string }>(
        "SELECT execution_id::text, owner FROM jobs WHERE execution_id = ANY($1::uuid[])",
        [execs],
      );
      const ownerOf = new Map(owners.rows.map((o) => [o.execution_id, o.owner]));
      const by = new Map<string, typeof leases>();
      for (const l of leases) {
        const owner = ownerOf.get(l.exec);
        if (owner) by.set(owner, [...(by.get(owner) ?? []), l]);
      }
      return by;
    };

    const watchSlots = async (victim: string, held: Array<{ holder: string; score: number }>, frozenAt: number) => {
      const out: SlotReturn[] = held.map((l) => ({
        victim,
        holder: l.holder,
        renewedBeforeFreezeMs: frozenAt - l.score,
        lastSeenMs: 0,
        goneByMs: null,
        contended: false,
        waitedMs: null,
      }));
      const scores = held.map((l) => l.score);
      const until = Date.now() + leaseTimeoutMs + opts.heartbeatMs + 15_000;
      while (out.some((s) => s.goneByMs === null) && Date.now() < until) {
        // Live waiters only: ones that polled in the last second (a poll is ≤ 750 ms apart). A
        // killed host's waiters stay queued, not polling, until the waiter timeout: they ask for
        // nothing, so an expired lease can sit until a live one does.
        const m = r
          .multi()
          .time()
          .zcount(seenKey, Date.now() - 1_000, "+inf");
        for (const s of out) m.zscore(leasesKey, s.holder);
        const replies = (await m.exec()) ?? [];
        const now = timeMs(replies[0]?.[1]);
        const waiters = Number(replies[1]?.[1] ?? 0);
        out.forEach((s, i) => {
          if (s.goneByMs !== null) return;
          const score = replies[i + 2]?.[1] as string | null;
          if (score === null) {
            // Only an acquire purges an expired lease: someone asked for the slot.
            s.goneByMs = now - frozenAt;
            s.contended = true;
            return;
          }
          scores[i] = Number(score);
          s.renewedBeforeFreezeMs = frozenAt - Number(score);
          s.lastSeenMs = now - frozenAt;
          if (waiters > 0 && now - Number(score) > leaseTimeoutMs) {
            s.contended = true;
            s.waitedMs ??= now - frozenAt;
          }
        });
        await sleep(SLOT_POLL_MS);
      }
      return out;
    };

    const slotReturns: SlotReturn[] = [];
    let kills = 0;
    let killsWithoutLease = 0;
    const kill = async () => {
      // Kills must not outpace replacements: keep at least hosts-1 alive (bounded wait).
      const until = Date.now() + 30_000;
      while (alive().length < Math.max(2, opts.hosts - 1) && Date.now() < until) await sleep(50);
      let victim: LiveHost | undefined;
      const lookUntil = Date.now() + 5_000;
      while (!victim && Date.now() < lookUntil) {
        const by = await leasesByHost();
        const holding = alive().filter((h) => (by.get(h.handle.id)?.length ?? 0) > 0);
        victim = holding[Math.floor(rand() * holding.length)];
        if (!victim) await sleep(20);
      }
      victim ??= alive()[Math.floor(rand() * alive().length)];
      if (!victim) return;
      const frozenAt = await serverMs();
      signalHost(victim.handle, "SIGSTOP");
      const held = (await leasesByHost()).get(victim.handle.id) ?? [];
      signalHost(victim.handle, "SIGKILL");
      victim.dead = true;
      kills++;
      log(`SIGKILL ${victim.handle.id} holding ${held.length} lease(s)`);
      track(spawnQuotaHost().then((h) => log(`replacement ${h.handle.id} up`)));
      if (held.length === 0) {
        killsWithoutLease++;
        return;
      }
      track(watchSlots(victim.handle.id, held, frozenAt).then((s) => slotReturns.push(...s)));
    };

    // Kills land while runs are still queueing: spread over the first ~60 % of the time the
    // limit needs to serve every run.
    const expectedMs = (opts.runs * ((lo + hi) / 2)) / opts.limit;
    const killAt = Array.from(
      { length: opts.kills },
      (_, i) => ((i + 0.5 + (rand() - 0.5) * 0.5) * 0.6 * expectedMs) / opts.kills,
    );
    for (const at of killAt) {
      const wait = loadStart + at - Date.now();
      if (wait > 0) await sleep(wait);
      await kill();
    }

    // --- every run ends: completed, or lost with its host -------------------------------------
    const deadline = Date.now() + opts.recoveryWindowMs + expectedMs * 3;
    const open = async () =>
      Number(
        (
          await db.query<{ n: string }>(
            "SELECT count(*) AS n FROM jobs WHERE id = ANY($1::uuid[]) AND state IN ('queued', 'running')",
            [ids],
          )
        ).rows[0]?.n,
      );
    while ((await open()) > 0 && Date.now() < deadline) await sleep(250);
    const loadMs = Date.now() - loadStart;
    loading = false;
    await sampler;
    await background.drain();
    const mockStats = await mock.stats();
    const rows = await db.query<{ state: string; code: string | null; n: string }>(
      "SELECT state, error->>'code' AS code, count(*) AS n FROM jobs WHERE id = ANY($1::uuid[]) GROUP BY 1, 2",
      [ids],
    );
    const outcomes: Record<string, number> = {};
    for (const row of rows.rows) {
      const k = row.state === "failed" ? `failed:${row.code}` : row.state;
      outcomes[k] = (outcomes[k] ?? 0) + Number(row.n);
    }
    const leaseLossesDuringLoad = leaseLossesReported;
    const liveLeasesAtEnd = await r.zcount(leasesKey, (await serverMs()) - leaseTimeoutMs, "+inf");
    log(`load done in ${loadMs} ms: ${JSON.stringify(outcomes)}`);

    const stopCheck = opts.stopCheck
      ? await runStopCheck({
          stack: st,
          mock,
          db,
          redis: r,
          leasesKey,
          readyKey,
          leaseTimeoutMs,
          hosts: () => alive().map((h) => h.handle),
          serverMs,
          log,
        })
      : null;

    return {
      seed: opts.seed,
      options: {
        runs: opts.runs,
        hosts: opts.hosts,
        kills: opts.kills,
        seed: opts.seed,
        limit: opts.limit,
        mockCap: opts.mockCap ?? opts.limit,
        maxRunsPerHost: opts.maxRunsPerHost,
        heartbeatMs: opts.heartbeatMs,
        streamMs: opts.streamMs,
        stopCheck: opts.stopCheck,
        recoveryWindowMs: opts.recoveryWindowMs,
      },
      leaseTimeoutMs,
      heartbeatMs: opts.heartbeatMs,
      outcomes,
      kills,
      killsWithoutLease,
      hostsSpawned,
      mock: mockStats,
      maxLeasesSeen,
      liveLeasesAtEnd,
      slotReturns,
      leaseLossesReported: leaseLossesDuringLoad,
      stopCheck,
      loadMs,
      durationMs: Date.now() - t0,
    };
  } finally {
    const killAll = () => {
      for (const h of hosts) {
        signalHost(h.handle, "SIGCONT");
        signalHost(h.handle, "SIGKILL");
      }
    };
    killAll();
    // A replacement still starting when the run failed would outlive it otherwise.
    await background.settle();
    killAll();
    redis?.disconnect();
    await pool?.end().catch(() => {});
    await stack?.stop().catch(() => {});
  }
}

/**
 * How long after its expiry (last renewal + lease timeout) a lease left the ZSET: only an acquire
 * purges, so this is how soon a waiter asked. Waiters poll every 5 ms near the head, up to
 * 500 ms (±50 %) further back, e.g. behind a killed host's own waiters until those time out.
 */
export function purgeLagMs(s: SlotReturn, leaseTimeoutMs: number): number | null {
  return s.goneByMs === null ? null : s.goneByMs - (leaseTimeoutMs - s.renewedBeforeFreezeMs);
}

/**
 * Bound on a SIGKILLed holder's slot coming back, from the kill: lease timeout (the last renewal
 * was at most that long before expiry) + one heartbeat, which covers the purge lag above (≤ 750 ms
 * by the waiters' poll cap) and a renewal still in flight when the host died.
 */
export function slotReturnBoundMs(r: Pick<ChaosQuotaReport, "leaseTimeoutMs" | "heartbeatMs">): number {
  return r.leaseTimeoutMs + r.heartbeatMs;
}

/**
 * A killed holder's slot came back late: later than the bound after the freeze, or than one
 * heartbeat after waiters were first seen queued behind its expired lease, whichever is later
 * (+ tolerance). Only an acquire purges an expired lease, so with nobody asking a slot can sit
 * expired: a run at the end of the load had no waiter for 3.8 s after an expiry, and its slot went
 * at the next acquire. One purged between polls with no waiter seen was taken at its first ask.
 */
export function slotReturnedLate(s: SlotReturn, r: Pick<ChaosQuotaReport, "leaseTimeoutMs" | "heartbeatMs">): boolean {
  if (s.goneByMs === null || s.waitedMs === null) return false;
  return s.goneByMs > Math.max(slotReturnBoundMs(r), s.waitedMs + r.heartbeatMs) + SLOT_RETURN_TOLERANCE_MS;
}

/** Every broken invariant, as a sentence; empty = the quota held. */
export function quotaViolations(r: ChaosQuotaReport): string[] {
  const v: string[] = [];
  const limit = r.options.limit;
  if (r.mock.max_concurrency_seen > limit)
    v.push(`mock saw ${r.mock.max_concurrency_seen} concurrent calls > limit ${limit}`);
  const failedRuns = Object.entries(r.outcomes).filter(
    ([k]) => k.startsWith("failed:") && k !== "failed:quota_lease_lost",
  );
  for (const [k, n] of failedRuns) v.push(`${n} runs ${k}`);
  if (r.mock.rejected_429 > 0) v.push(`mock answered ${r.mock.rejected_429} requests with 429`);
  if (r.mock.violations > 0) v.push(`mock counted ${r.mock.violations} over-cap admissions`);
  if (r.maxLeasesSeen > limit) v.push(`lease ZSET held ${r.maxLeasesSeen} members > limit ${limit}`);
  if (r.liveLeasesAtEnd > 0) v.push(`${r.liveLeasesAtEnd} unexpired leases left after every run ended`);
  const total = Object.values(r.outcomes).reduce((a, b) => a + b, 0);
  if (total !== r.options.runs) v.push(`${total} of ${r.options.runs} runs found`);
  for (const k of ["queued", "running"]) if (r.outcomes[k]) v.push(`${r.outcomes[k]} runs still ${k}`);
  for (const s of r.slotReturns) {
    if (slotReturnedLate(s, r)) {
      v.push(
        `slot of ${s.holder} (${s.victim}) came back ${s.goneByMs} ms after the freeze, waiters seen at ${s.waitedMs} ms`,
      );
    }
    if (s.goneByMs === null && s.contended)
      v.push(`slot of ${s.holder} (${s.victim}) never came back though waiters queued`);
  }
  const sc = r.stopCheck;
  if (sc) {
    if (sc.requestsAfter !== 3)
      v.push(`stop check: the frozen run made ${sc.requestsAfter} model requests, not 3 (first, asked again, input)`);
    if (sc.firstRequestOutcome !== "completed")
      v.push(`stop check: first answer ${sc.firstRequestOutcome} while frozen`);
    if (sc.leaseAgeAtContMs !== null && sc.leaseAgeAtContMs <= sc.leaseTimeoutMs) {
      v.push(`stop check: lease only ${sc.leaseAgeAtContMs} ms old at SIGCONT (not expired)`);
    }
    if (sc.frozenHeldAgain) v.push(`stop check: the expired lease ${sc.frozenHolder} was held again after SIGCONT`);
    if (sc.holdersAfterCont.length === 0) v.push("stop check: no new lease was seen for the turn asked again");
    if (sc.turnReasons.join(",") !== "start,lease_lost,input")
      v.push(`stop check: model.turn reasons ${sc.turnReasons.join(",")}, not start,lease_lost,input`);
    if (sc.state !== "completed")
      v.push(`stop check: run ended ${sc.state}${sc.errorCode ? ` (${sc.errorCode})` : ""}, not completed`);
    if (sc.events.at(-1) !== "run.completed") v.push(`stop check: last event ${sc.events.at(-1)}, not run.completed`);
  }
  return v;
}
