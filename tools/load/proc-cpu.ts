/**
 * CPU of every part of the stack during a step, from /proc/<pid>/stat (utime + stime of all the
 * process's threads, in clock ticks of 10 ms: Linux reports them in USER_HZ, 100 on every
 * architecture it exposes /proc on).
 *
 * Which processes: the descendants of the stack's root process, re-read at every sample (a
 * Postgres backend comes and goes with its connection). The root is the load process itself for a
 * self-started stack (everything it starts is its child), the `pid` in `.dev/stack.json` for
 * `npm run dev`; with neither (flags only) every process on the machine whose command line names a
 * part of the stack is taken (workerd, sandbox-host, postgres, redis-server, the bridges, the mock
 * model), which also counts another stack on the same machine: the result says so.
 *
 * Each process gets a part by its command line (workerd, postgres, …; a host by its known pid or
 * `sandbox-host/main`); a process that names nothing takes its parent's part (a shell or npm
 * wrapper, a helper child). A process that appears during the window counts from its start, one
 * that exits counts up to its last sample (one sample interval of its CPU may be missed).
 * Beside the CPU used, the CPU waited for: each thread's `run_delay` (/proc/<pid>/task/<tid>/schedstat,
 * ns runnable but not running), summed per part: on a machine whose other work saturates the
 * cores, a part that uses little CPU and waits long is starved, not busy. And the whole machine's
 * busy cores (/proc/stat), so the stack's share of what was used is visible.
 * Linux only; elsewhere the step has no CPU figures (null).
 */
import { readdir, readFile } from "node:fs/promises";
import { cpus } from "node:os";
import type { ProcCpu, StepCpu } from "./types";

const TICK_MS = 10;

interface Sample {
  part: string;
  pid: number;
  ticks: number;
  waits: Map<string, number>;
}

/** Busy and total jiffies of the whole machine (/proc/stat, first line). */
async function machineTicks(): Promise<{ busy: number; total: number } | null> {
  try {
    const f = (await readFile("/proc/stat", "utf8")).split("\n")[0]?.trim().split(/\s+/).slice(1).map(Number) ?? [];
    const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
    const idle = (f[3] ?? 0) + (f[4] ?? 0);
    return { busy: total - idle, total };
  } catch {
    return null;
  }
}

interface Stat {
  pid: number;
  ppid: number;
  comm: string;
  ticks: number;
  start: string;
}

async function readStat(pid: number): Promise<Stat | null> {
  try {
    const text = await readFile(`/proc/${pid}/stat`, "utf8");
    const close = text.lastIndexOf(")");
    const comm = text.slice(text.indexOf("(") + 1, close);
    const f = text.slice(close + 2).split(" ");
    // After the comm: state(0) ppid(1) … utime(11) stime(12) … starttime(19)
    return {
      pid,
      ppid: Number(f[1]),
      comm,
      ticks: Number(f[11]) + Number(f[12]),
      start: f[19] ?? "",
    };
  } catch {
    return null; // gone
  }
}

async function allPids(): Promise<number[]> {
  const names = await readdir("/proc");
  return names.filter((n) => /^\d+$/.test(n)).map(Number);
}

/** A known process's part by pid (hosts, the load's own processes), beside the command-line rules. */
export interface CpuScope {
  /** Roots whose descendants (and themselves) are the stack; empty: scan the machine by command line. */
  roots: number[];
  /** Parts of processes known by pid. */
  known: Map<number, string>;
  /** The part name of each root whose command line names nothing (e.g. "load parent"). */
  source: string;
}

const RULES: Array<[RegExp, string]> = [
  [/(^|\/)workerd\b/, "workerd"],
  [/gateway-runner|wrangler/, "gateway runner (node)"],
  [/(^|\/)postgres\b|postgres: /, "postgres"],
  [/redis-server/, "redis"],
  [/pg-proxy/, "pg bridge"],
  [/upstash-rest/, "upstash bridge"],
  [/mock-model/, "mock model"],
  [/sandbox-host\/main|sandbox-host\.m?js/, "host"],
];

function ruleFor(comm: string, cmd: string): string | null {
  for (const [re, part] of RULES) if (re.test(cmd) || re.test(comm)) return part;
  return null;
}

export class ProcCpuSampler {
  private cmdCache = new Map<string, string>();
  private available = process.platform === "linux";

  constructor(private readonly scope: () => CpuScope) {}

  private async cmdline(s: Stat): Promise<string> {
    const key = `${s.pid}:${s.start}`;
    const hit = this.cmdCache.get(key);
    if (hit !== undefined) return hit;
    const raw = await readFile(`/proc/${s.pid}/cmdline`, "utf8").catch(() => "");
    const cmd = raw.split("\0").join(" ").trim();
    this.cmdCache.set(key, cmd);
    return cmd;
  }

  /** ns each thread of `pid` waited on a run queue, by tid. */
  private async waits(pid: number): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    const tids = await readdir(`/proc/${pid}/task`).catch(() => [] as string[]);
    await Promise.all(
      tids.map(async (tid) => {
        const text = await readFile(`/proc/${pid}/task/${tid}/schedstat`, "utf8").catch(() => null);
        const wait = text ? Number(text.split(" ")[1]) : Number.NaN;
        if (Number.isFinite(wait)) out.set(tid, wait);
      }),
    );
    return out;
  }

  /** pid:start → part, CPU ticks and run-queue waits for every process of the stack now. */
  async sample(): Promise<Map<string, Sample>> {
    const out = new Map<string, Sample>();
    if (!this.available) return out;
    const { roots, known } = this.scope();
    const stats = (await Promise.all((await allPids()).map(readStat))).filter((s): s is Stat => s !== null);
    const byPid = new Map(stats.map((s) => [s.pid, s]));
    const parts = new Map<number, string | null>();
    const partOf = async (s: Stat): Promise<string | null> => {
      if (parts.has(s.pid)) return parts.get(s.pid) ?? null;
      const byKnown = known.get(s.pid);
      let part: string | null = byKnown ?? null;
      if (!part) {
        const rule = ruleFor(s.comm, await this.cmdline(s));
        part = rule;
      }
      if (!part) {
        const parent = byPid.get(s.ppid);
        part = parent && parent.pid !== s.pid && s.ppid > 1 ? await partOf(parent) : null;
      }
      parts.set(s.pid, part);
      return part;
    };
    let members: Stat[];
    if (roots.length) {
      const children = new Map<number, Stat[]>();
      for (const s of stats) children.set(s.ppid, [...(children.get(s.ppid) ?? []), s]);
      members = [];
      const queue = roots.map((r) => byPid.get(r)).filter((s): s is Stat => !!s);
      const seen = new Set<number>();
      while (queue.length) {
        const s = queue.shift() as Stat;
        if (seen.has(s.pid)) continue;
        seen.add(s.pid);
        members.push(s);
        queue.push(...(children.get(s.pid) ?? []));
      }
    } else {
      members = [];
      for (const s of stats) if (known.has(s.pid) || ruleFor(s.comm, await this.cmdline(s))) members.push(s);
    }
    await Promise.all(
      members.map(async (s) => {
        const part = await partOf(s);
        if (part) out.set(`${s.pid}:${s.start}`, { part, pid: s.pid, ticks: s.ticks, waits: await this.waits(s.pid) });
      }),
    );
    return out;
  }

  /**
   * Takes the window's first sample (resolves once it is taken: CPU used before it is not the
   * window's), then samples every `intervalMs` until stop(); stop() resolves the CPU per part.
   */
  async startWindow(intervalMs = 1000): Promise<{ stop: () => Promise<StepCpu | null> }> {
    if (!this.available) return { stop: async () => null };
    const t0 = Date.now();
    const first = new Map<string, number>();
    const last = new Map<string, Sample>();
    const firstWait = new Map<string, number>();
    const lastWait = new Map<string, { part: string; ns: number }>();
    const m0 = machineTicks();
    let samples = 0;
    let initial = true;
    const take = async () => {
      const now = await this.sample().catch(() => new Map<string, Sample>());
      samples++;
      for (const [key, v] of now) {
        // Present at the window's start: counted from then; appeared later: counted from its start.
        if (!first.has(key)) first.set(key, initial ? v.ticks : 0);
        last.set(key, v);
        for (const [tid, ns] of v.waits) {
          const k = `${key}/${tid}`;
          if (!firstWait.has(k)) firstWait.set(k, initial ? ns : 0);
          lastWait.set(k, { part: v.part, ns });
        }
      }
      initial = false;
    };
    let running = true;
    let timer: NodeJS.Timeout | undefined;
    await take();
    let current = Promise.resolve();
    const loop = () => {
      timer = setTimeout(() => {
        current = take().then(() => {
          if (running) loop();
        });
      }, intervalMs);
    };
    loop();
    return {
      stop: async () => {
        running = false;
        clearTimeout(timer);
        await current;
        await take();
        const [a, b] = await Promise.all([m0, machineTicks()]);
        const wallMs = Date.now() - t0;
        const r2 = (x: number) => Math.round(x * 100) / 100;
        const byPart = new Map<string, { pids: Set<number>; ticks: number; waitNs: number }>();
        const agg = (part: string) => {
          const x = byPart.get(part) ?? { pids: new Set<number>(), ticks: 0, waitNs: 0 };
          byPart.set(part, x);
          return x;
        };
        for (const [key, v] of last) {
          const x = agg(v.part);
          x.pids.add(v.pid);
          x.ticks += Math.max(0, v.ticks - (first.get(key) ?? v.ticks));
        }
        for (const [k, v] of lastWait) agg(v.part).waitNs += Math.max(0, v.ns - (firstWait.get(k) ?? v.ns));
        const parts: ProcCpu[] = [...byPart]
          .map(([part, x]) => ({
            part,
            pids: [...x.pids].sort((p, q) => p - q),
            cpuMs: x.ticks * TICK_MS,
            cores: r2((x.ticks * TICK_MS) / Math.max(1, wallMs)),
            runQueueWaitMs: Math.round(x.waitNs / 1e6),
            waitingCores: r2(x.waitNs / 1e6 / Math.max(1, wallMs)),
          }))
          .sort((p, q) => q.cpuMs - p.cpuMs);
        const machineCores =
          a && b && b.total > a.total ? r2(((b.busy - a.busy) / (b.total - a.total)) * cpus().length) : null;
        return {
          wallMs,
          samples,
          source: this.scope().source,
          parts,
          totalCores: r2(parts.reduce((s, p) => s + p.cores, 0)),
          machineBusyCores: machineCores,
        };
      },
    };
  }
}
