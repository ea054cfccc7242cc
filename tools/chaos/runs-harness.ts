/**
 * The run chaos harness (`npm run chaos:runs`): where chaos:claims checks who owns a job, this
 * checks what a job does across the loss of its host — the model in which a job continues in a
 * new execution from the journal of the last one, and a side effect never runs twice.
 *
 * Parts: the real gateway, Postgres and Redis of `startStack({ hosts: 0 })`, the mock model, a
 * recording MCP server (recording-mcp.ts: `charge`, never to be repeated; `lookup`, declared
 * idempotent), and N real bundled hosts, each reaching Postgres through its own proxy.
 * Jobs, seeded: plain streaming answers (no agent); an agent whose turn calls `charge`; one whose
 * turn calls `lookup` (idempotent); one whose `charge` needs an approval (the harness approves
 * through the API); a parent that delegates to the charging agent (the child is a job of its own).
 * Faults, seeded and aimed from what the stack shows:
 *  - kill_mid_stream: SIGKILL a host running a job with no tool call in flight;
 *  - kill_mid_tool: SIGKILL the host whose call the MCP server is holding;
 *  - kill_mid_wait: SIGKILL the host running a job that resumed from an approval;
 *  - kill_mid_delegation: SIGKILL the host running a delegating parent;
 *  - sigterm_handoff: SIGTERM (a deploy) a host running a job, with a short grace;
 *  - partition_pg: cut a host off from Postgres past the lost bound, the process running on;
 *  - rolling_restart: every host in turn replaced (a new one up, then SIGTERM the old).
 * After a recovery window, runs-checker.ts judges every job (children too) from the rows, the
 * MCP server's record and each job's stream read through the gateway. With `forks`, forks and
 * replays of the load's jobs are made while the faults land and judged by runs-forks.ts.
 */
import { resolve } from "node:path";
import pg from "pg";
import { sleep } from "../../src/domain/async";
import { type HostHandle, type Stack, startStack } from "../stack/start";
import { bundleHost, signalHost, spawnBundledHost } from "./bundled-host";
import { backgroundTasks, mulberry32, STREAM_READ_MS } from "./harness";
import { readJobStream } from "./job-stream";
import { ChaosProxy } from "./pg-chaos-proxy";
import { type RecordingMcp, startRecordingMcp } from "./recording-mcp";
import { checkRuns, type RunCheckResult, type RunStreamEvent } from "./runs-checker";
import { checkForks, FORK_OPS, type ForkCheck, Forker } from "./runs-forks";

export const RUN_FAULT_KINDS = [
  "kill_mid_stream",
  "kill_mid_tool",
  "kill_mid_wait",
  "kill_mid_delegation",
  "sigterm_handoff",
  "partition_pg",
  "rolling_restart",
] as const;
export type RunFaultKind = (typeof RUN_FAULT_KINDS)[number];

export const JOB_KINDS = ["stream", "charge", "lookup", "approval", "parent"] as const;
export type JobKind = (typeof JOB_KINDS)[number];

export interface RunsChaosOptions {
  jobs: number;
  faults: number;
  hosts: number;
  seed: number;
  faultEveryMs: number;
  recoveryWindowMs: number;
  /**
   * Forks and replays made from the load's jobs while the faults land (runs-forks.ts), spread
   * over the load like the faults; 0 or unset: none.
   */
  forks?: number;
  root?: string;
  log?: (line: string) => void;
}

export interface RunsChaosReport {
  seed: number;
  check: RunCheckResult;
  faults: Record<RunFaultKind, number>;
  faultsMissed: Record<RunFaultKind, number>;
  submitted: Record<JobKind, number>;
  /** Children the parents' delegate calls created (judged like the submitted jobs). */
  children: number;
  toolCalls: { charge: number; lookup: number; aborted: number };
  hostsSpawned: number;
  streamsRead: number;
  durationMs: number;
  /** The forks' verdict (null when no fork was asked for). */
  forks: ForkCheck | null;
}

/** Short bounds, so recovery happens inside the run (as chaos:claims; HOST_SHUTDOWN_GRACE_MS short: a deploy). */
export const RUN_CHAOS_HOST_ENV = {
  HOST_MAX_RUNS: "4",
  HOST_HEARTBEAT_MS: "300",
  HOST_RUN_LOST_AFTER_MS: "1200",
  HOST_CLAIM_TIMEOUT_MS: "800",
  HOST_REAP_MS: "200",
  HOST_SWEEP_MS: "500",
  HOST_SWEEP_OLDER_THAN_MS: "500",
  HOST_SHUTDOWN_GRACE_MS: "300",
  HOST_OUTBOX_FLUSH_TIMEOUT_MS: "1000",
  SANDBOX_ENABLED: "false",
};
/** Past the lost bound (1.2 s) and a reaper pass or two. */
const PARTITION_MS = 2500;

interface LiveHost {
  handle: HostHandle;
  proxy: ChaosProxy;
  /** Dead, cut off, or on its way out: not a victim for another fault. */
  busy: boolean;
}

export function scheduleRunFaults(n: number, rand: () => number): RunFaultKind[] {
  const aimed = RUN_FAULT_KINDS.filter((k) => k !== "rolling_restart");
  const list: RunFaultKind[] = [];
  for (let i = 0; i < n; i++) list.push(i < aimed.length ? (aimed[i] as RunFaultKind) : pick(aimed, rand));
  for (let i = list.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [list[i], list[j]] = [list[j] as RunFaultKind, list[i] as RunFaultKind];
  }
  // One rolling restart of the whole fleet, two thirds of the way through the load.
  list.splice(Math.floor((list.length * 2) / 3), 0, "rolling_restart");
  return list;
}

function pick<T>(xs: readonly T[], rand: () => number): T {
  return xs[Math.floor(rand() * xs.length)] as T;
}

const words = (n: number, tag: string) => Array.from({ length: n }, (_, i) => `${tag}${i}`).join(" ");

export async function runChaosRuns(opts: RunsChaosOptions): Promise<RunsChaosReport> {
  const t0 = Date.now();
  const log = opts.log ?? (() => {});
  const root = resolve(opts.root ?? process.cwd());
  const rand = mulberry32(opts.seed);
  const faults = Object.fromEntries(RUN_FAULT_KINDS.map((k) => [k, 0])) as Record<RunFaultKind, number>;
  const faultsMissed = { ...faults };
  const submitted = Object.fromEntries(JOB_KINDS.map((k) => [k, 0])) as Record<JobKind, number>;
  const ids: string[] = [];
  const kindOf = new Map<string, JobKind>();
  const hosts: LiveHost[] = [];
  const background = backgroundTasks(log);
  let hostsSpawned = 0;
  let mcp: RecordingMcp | null = null;
  let stack: Stack | null = null;
  let pool: pg.Pool | null = null;
  try {
    // Calls take 300–900 ms: long enough for a kill to land inside one.
    mcp = await startRecordingMcp(() => 300 + Math.floor(Math.random() * 600));
    const allowed = mcp.url;
    stack = await startStack({
      root,
      hosts: 0,
      mockModel: { ttftMs: 5, tokensPerS: 2000 },
      // The per-key rate limit off: at 2,000 jobs the harness's own polling, approvals and the
      // final 8-reader stream pass went past 1,200 requests per 10 s, and 520 stream reads got
      // a 429 that read as "no terminal event" (docs/limits.md has the limit; not what is judged here).
      gatewayVars: { MCP_ALLOWED_URLS: allowed, RATE_LIMIT_REQUESTS: "0" },
      hostEnv: { MCP_ALLOWED_URLS: allowed },
      log: (src, line) => {
        if (src !== "host") log(`[${src}] ${line}`);
      },
    });
    const st = stack;
    pool = new pg.Pool({ connectionString: st.databaseUrl, max: 4 });
    const db = pool;
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${st.gatewayUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${st.apiKey}`, "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json().catch(() => null)) as Record<string, unknown> | null };
    };
    const server = (tools: unknown[]) => [{ name: "rec", url: allowed, tools, timeout_ms: 10_000 }];
    const agents: Record<string, Record<string, unknown>> = {
      pay: { mcp_servers: server(["charge"]) },
      look: { mcp_servers: server([{ name: "lookup", idempotent: true }]) },
      gate: { mcp_servers: server([{ name: "charge", requires_approval: true }]) },
      boss: { delegates: ["pay"] },
    };
    for (const [name, def] of Object.entries(agents)) {
      const r = await api("POST", "/v1/agents", { name, model: st.modelName, ...def });
      if (r.status !== 201) throw new Error(`agent ${name}: ${r.status} ${JSON.stringify(r.body)}`);
    }

    const pgUrl = new URL(st.databaseUrl);
    const bundle = await bundleHost(root);
    const spawn = async (): Promise<LiveHost> => {
      const proxy = new ChaosProxy({
        target: { host: pgUrl.hostname, port: Number(pgUrl.port) },
        claimDelayMs: 0,
        startDelayMs: 0,
      });
      const url = new URL(st.databaseUrl);
      url.port = String(await proxy.listen());
      const n = ++hostsSpawned;
      const handle = await spawnBundledHost(
        bundle,
        st.hostEnv({ ...RUN_CHAOS_HOST_ENV, DATABASE_URL: url.toString(), HOST_ID: `runs-${n}` }),
        () => {},
      ).catch(async (e) => {
        await proxy.close();
        throw e;
      });
      const h: LiveHost = { handle, proxy, busy: false };
      hosts.push(h);
      return h;
    };
    await Promise.all(Array.from({ length: opts.hosts }, () => spawn()));
    const alive = () => hosts.filter((h) => !h.busy);
    const byId = (id: string | null | undefined) => hosts.find((h) => h.handle.id === id && !h.busy) ?? null;

    // --- the jobs -----------------------------------------------------------------------
    const schedule = scheduleRunFaults(opts.faults, rand);
    const loadMs = schedule.length * opts.faultEveryMs;
    const plan = Array.from({ length: opts.jobs }, (_, i) => {
      const r = rand();
      const kind: JobKind =
        r < 0.35 ? "stream" : r < 0.6 ? "charge" : r < 0.75 ? "lookup" : r < 0.88 ? "approval" : "parent";
      return { at: (i * loadMs) / opts.jobs, kind, i };
    });
    const script = (i: number, tool: string | null, reply: string): string =>
      `!mock ${JSON.stringify({
        ...(tool
          ? {
              tool_calls: [
                {
                  name: tool,
                  args: tool.endsWith("charge")
                    ? { amount: i }
                    : tool.endsWith("lookup")
                      ? { q: `o${i}` }
                      : { input: chargeScript(i) },
                },
              ],
            }
          : {}),
        reply,
        ttft_ms: 100,
        tokens_per_s: 40,
      })}`;
    const chargeScript = (i: number): string => script(i, "rec__charge", `child ${i} paid ${words(12, "c")}`);
    const bodyOf = (kind: JobKind, i: number) => {
      const reply = `${kind} ${i} ${words(30, "w")}`;
      if (kind === "stream") return { input: { messages: [{ role: "user", content: script(i, null, reply) }] } };
      const [agent, tool] =
        kind === "charge"
          ? ["pay", "rec__charge"]
          : kind === "lookup"
            ? ["look", "rec__lookup"]
            : kind === "approval"
              ? ["gate", "rec__charge"]
              : ["boss", "delegate_pay"];
      return { agent, input: { messages: [{ role: "user", content: script(i, tool as string, reply) }] } };
    };
    const submitOne = async (p: (typeof plan)[number]) => {
      const r = await api("POST", "/v1/jobs", bodyOf(p.kind, p.i));
      const job = r.body?.job as { id: string } | undefined;
      if (r.status !== 202 || !job) throw new Error(`submit ${p.kind}: ${r.status} ${JSON.stringify(r.body)}`);
      ids.push(job.id);
      kindOf.set(job.id, p.kind);
      submitted[p.kind]++;
    };

    // Approvals: a person who answers every waiting call after 100–400 ms.
    let loading = true;
    const approvals = new Map<string, number>();
    const approver = (async () => {
      const seen = new Set<string>();
      while (loading || seen.size < submitted.approval) {
        const w = await db.query<{ job_id: string; call_id: string; asked: string }>(
          "SELECT job_id, call_id, requested_at::text AS asked FROM job_waits WHERE decision IS NULL AND kind = 'approval'",
        );
        // A call asked again after a recovery (outcome unknown) is a new question: keyed by when it was asked.
        for (const { job_id, call_id, asked } of w.rows) {
          const k = `${job_id}:${call_id}:${asked}`;
          if (seen.has(k)) continue;
          seen.add(k);
          background.track(
            sleep(100 + Math.floor(Math.random() * 300)).then(async () => {
              const r = await api("POST", `/v1/jobs/${job_id}/approvals/${call_id}`, { decision: "approve" });
              const key = `${job_id}:${call_id}`;
              if (r.status === 202) approvals.set(key, (approvals.get(key) ?? 0) + 1);
            }),
          );
        }
        if (!loading && Date.now() > t0 + loadMs + opts.recoveryWindowMs + 60_000) break;
        await sleep(150);
      }
    })();

    // --- the faults -----------------------------------------------------------------------
    const runningOwners = async (where: string) =>
      (await db.query<{ owner: string }>(`SELECT owner FROM jobs WHERE state = 'running' AND ${where}`)).rows.map(
        (r) => r.owner,
      );
    const findVictim = async (kind: RunFaultKind): Promise<LiveHost | null> => {
      const until = Date.now() + 5000;
      while (Date.now() < until) {
        let owners: string[] = [];
        if (kind === "kill_mid_tool") {
          const execs = mcp!.inFlight().map((c) => c.executionId);
          if (execs.length) {
            owners = (
              await db.query<{ host: string }>(
                "SELECT e.host FROM executions e JOIN jobs j ON j.execution_id = e.id WHERE e.id = ANY($1::uuid[]) AND j.state = 'running'",
                [execs],
              )
            ).rows.map((r) => r.host);
          }
        } else if (kind === "kill_mid_wait") {
          owners = await runningOwners("agent_name = 'gate' AND epoch > 1");
        } else if (kind === "kill_mid_delegation") {
          owners = await runningOwners("agent_name = 'boss'");
        } else {
          const busyExecs = mcp!.inFlight().map((c) => c.executionId);
          owners = (
            await db.query<{ owner: string }>(
              "SELECT owner FROM jobs WHERE state = 'running' AND NOT (execution_id = ANY($1::uuid[]))",
              [busyExecs],
            )
          ).rows.map((r) => r.owner);
        }
        const found = owners.map(byId).filter((h): h is LiveHost => h !== null);
        if (found.length) return pick(found, rand);
        await sleep(30);
      }
      return null;
    };
    const kill = async (kind: RunFaultKind, victim: LiveHost) => {
      victim.busy = true;
      victim.proxy.pause();
      signalHost(victim.handle, "SIGKILL");
      await victim.proxy.close();
      faults[kind]++;
      log(`${kind}: ${victim.handle.id}`);
      background.track(spawn());
    };
    const sigterm = async (victim: LiveHost) => {
      victim.busy = true;
      signalHost(victim.handle, "SIGTERM");
      await new Promise<void>((r) => {
        if (victim.handle.process.exitCode !== null) return r();
        victim.handle.process.once("exit", () => r());
        setTimeout(r, 15_000);
      });
      signalHost(victim.handle, "SIGKILL");
      await victim.proxy.close();
    };
    const fault = async (kind: RunFaultKind) => {
      // Keep the fleet at strength before the next fault.
      const until = Date.now() + 15_000;
      while (alive().length < opts.hosts && Date.now() < until) await sleep(50);
      if (kind === "rolling_restart") {
        for (const old of [...alive()]) {
          await spawn();
          await sigterm(old);
        }
        faults.rolling_restart++;
        log(`rolling_restart: ${opts.hosts} hosts replaced`);
        return;
      }
      const victim = await findVictim(kind);
      if (!victim) {
        faultsMissed[kind]++;
        log(`${kind}: no victim`);
        return;
      }
      if (kind === "sigterm_handoff") {
        faults[kind]++;
        log(`${kind}: ${victim.handle.id}`);
        background.track(spawn());
        await sigterm(victim);
      } else if (kind === "partition_pg") {
        victim.busy = true;
        victim.proxy.pause();
        faults[kind]++;
        log(`${kind}: ${victim.handle.id} cut off for ${PARTITION_MS} ms`);
        background.track(
          sleep(PARTITION_MS).then(() => {
            victim.proxy.resume();
            victim.busy = false;
          }),
        );
      } else await kill(kind, victim);
    };

    const loadStart = Date.now();
    let faultsDone = 0;
    const submitter = (async () => {
      const inflight: Promise<void>[] = [];
      for (const [i, p] of plan.entries()) {
        const wait = loadStart + p.at - Date.now();
        if (wait > 0) await sleep(wait);
        // Faults run late on a loaded machine (a rolling restart takes seconds): the load waits
        // for them, so the last faults still find runs to land in.
        while (faultsDone < Math.floor((i * schedule.length) / opts.jobs) - 1) await sleep(20);
        inflight.push(submitOne(p));
      }
      await Promise.all(inflight);
    })();
    const faulter = (async () => {
      for (const [i, kind] of schedule.entries()) {
        const wait = loadStart + (i + 0.5) * opts.faultEveryMs - Date.now();
        if (wait > 0) await sleep(wait);
        await fault(kind);
        faultsDone++;
      }
    })();
    // Forks and replays of the streaming, charging and looking-up jobs (none asks a person), at
    // their own even pace over the load, so they meet hosts dying (runs-forks.ts).
    const forker = new Forker({
      api,
      db,
      rand,
      log,
      sources: () => ids.filter((id) => ["stream", "charge", "lookup"].includes(kindOf.get(id) as string)),
      agents: ["pay", "look"],
    });
    const forkCount = opts.forks ?? 0;
    const forking = (async () => {
      for (let i = 0; i < forkCount; i++) {
        const wait = loadStart + ((i + 0.5) * loadMs) / forkCount - Date.now();
        if (wait > 0) await sleep(wait);
        await forker.one(FORK_OPS[i % FORK_OPS.length] as (typeof FORK_OPS)[number]);
      }
    })();
    await Promise.all([submitter, faulter, forking]);
    await background.drain();

    // --- recovery window, then the verdict --------------------------------------------------
    const treeOf = async () =>
      (
        await db.query<{ id: string }>(
          "SELECT id FROM jobs WHERE id = ANY($1::uuid[]) OR root_job_id = ANY($1::uuid[])",
          [ids],
        )
      ).rows.map((r) => r.id);
    const deadline = Date.now() + opts.recoveryWindowMs;
    let all = await treeOf();
    while (Date.now() < deadline) {
      all = await treeOf();
      const open = await db.query<{ n: string }>(
        "SELECT count(*) AS n FROM jobs WHERE id = ANY($1::uuid[]) AND state IN ('queued','running','waiting')",
        [[...all, ...forker.forkIds]],
      );
      if (Number(open.rows[0]?.n) === 0) break;
      await sleep(250);
    }
    loading = false;
    await approver;
    await background.drain();

    const jobs = await db.query<{ id: string; state: string; recoveries: number; output: string | null }>(
      "SELECT id, state, recoveries, output FROM jobs WHERE id = ANY($1::uuid[])",
      [all],
    );
    const execs = await db.query<{
      id: string;
      job_id: string;
      epoch: number;
      started_at: Date;
      finished_at: Date | null;
    }>("SELECT id, job_id, epoch, started_at, finished_at FROM executions WHERE job_id = ANY($1::uuid[])", [all]);
    const streams = await readStreams(st, all);
    const dump = (id: string) =>
      (streams.get(id) ?? [])
        .map(
          (e) =>
            `${e.offset}:${e.type}@${e.executionId.slice(0, 4)}${e.type === "model.delta" ? `(${String(e.payload.text)})` : e.type === "model.turn" ? `(${JSON.stringify(e.payload)})` : ""}`,
        )
        .join(" ");
    const check = checkRuns(all, {
      jobs: jobs.rows.map((r) => ({ id: r.id, state: r.state, recoveries: r.recoveries, output: r.output })),
      executions: execs.rows.map((r) => ({
        id: r.id,
        jobId: r.job_id,
        epoch: r.epoch,
        startedAt: r.started_at.getTime(),
        finishedAt: r.finished_at?.getTime() ?? null,
      })),
      calls: mcp.calls,
      approvals,
      streams,
    });
    for (const v of check.verdicts) if (v.cls === "stream_disagrees") log(`stream of ${v.id}: ${dump(v.id)}`);
    const forks = forkCount > 0 ? await checkForks(db, forker, mcp.calls) : null;
    return {
      seed: opts.seed,
      check,
      faults,
      faultsMissed,
      submitted,
      children: all.length - ids.length,
      toolCalls: {
        charge: mcp.calls.filter((c) => c.tool === "charge").length,
        lookup: mcp.calls.filter((c) => c.tool === "lookup").length,
        aborted: mcp.calls.filter((c) => c.aborted).length,
      },
      hostsSpawned,
      streamsRead: streams.size,
      durationMs: Date.now() - t0,
      forks,
    };
  } finally {
    for (const h of hosts) {
      signalHost(h.handle, "SIGCONT");
      signalHost(h.handle, "SIGKILL");
      await h.proxy.close().catch(() => {});
    }
    await background.settle();
    await pool?.end().catch(() => {});
    await stack?.stop().catch(() => {});
    await mcp?.close().catch(() => {});
  }
}

/**
 * Every job's stream as a client reads it (SSE through the gateway, 8 readers, ≤ 20 s each). A
 * read that failed (an HTTP error, a reset) is tried again up to 3 times, as a client would, and
 * one that still fails is printed with its error: the checker then judges what was read, so a
 * failed read shows as a stream that disagrees, never as silence.
 */
async function readStreams(st: Stack, ids: string[]): Promise<Map<string, RunStreamEvent[]>> {
  const out = new Map<string, RunStreamEvent[]>();
  const queue = [...ids];
  const reader = async () => {
    for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
      let read = await readJobStream(st, id, STREAM_READ_MS);
      for (let attempt = 1; read.error !== null && attempt <= 3; attempt++) {
        await sleep(250 * attempt);
        read = await readJobStream(st, id, STREAM_READ_MS);
      }
      // Printed whatever the verbosity: the anomaly it becomes needs its cause beside it.
      if (read.error !== null) console.error(`stream of ${id} unreadable after 4 tries: ${read.error}`);
      out.set(id, read.events);
    }
  };
  await Promise.all(Array.from({ length: 8 }, reader));
  return out;
}
