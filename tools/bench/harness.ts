/**
 * The benches' one harness, so a bench file is only its measurement. Every bench gets the same
 * four things from here: its flags through `node:util` `parseArgs` (strict, so a mistyped flag is
 * an error rather than a default silently measured; every bench also takes `--json` and
 * `--help`), the statistics (nearest-rank, `tools/lib/stats.ts`), the load average beside its
 * figures (the machine is shared: a figure without the load it ran under cannot be judged), and
 * its output: lines and tables for people, and with `--json` one JSON document on stdout for
 * machines, the lines then going to stderr so that stdout parses as it is.
 */
import { readFile } from "node:fs/promises";
import { loadavg } from "node:os";
import { type ParseArgsConfig, parseArgs } from "node:util";
import { pct } from "../lib/stats";
import { textTable } from "../lib/table";

export { dist, pct } from "../lib/stats";

/** parseArgs's option table (@types/node does not export its name). */
type ParseArgsOptionsConfig = NonNullable<ParseArgsConfig["options"]>;

const COMMON = {
  json: { type: "boolean", default: false },
  help: { type: "boolean", default: false },
} as const satisfies ParseArgsOptionsConfig;

/** What parseArgs gives for each flag: a boolean, a string when it has a default, else maybe none. */
type Values<O extends ParseArgsOptionsConfig> = {
  [K in keyof O]: O[K] extends { type: "boolean" }
    ? boolean
    : O[K] extends { default: string }
      ? string
      : string | undefined;
} & { json: boolean; help: boolean };

export interface BenchSpec<O extends ParseArgsOptionsConfig> {
  /** What `--help` and a wrong flag print, e.g. `npm run bench:tree -- [--trees 20] [--json]`. */
  usage: string;
  /** The bench's own flags (`--json` and `--help` are added). */
  options?: O;
  /** Whether it takes positional arguments (the older benches' `bench:approvals [N]` form). */
  positionals?: boolean;
}

/** The 1, 5 and 15 minute load averages, two decimals. */
export function loadAverage(): number[] {
  return loadavg().map((l) => Math.round(l * 100) / 100);
}

/**
 * CPU seconds (user + system) used so far by process `pid` and its descendants (a bridge with
 * workers is several processes), from /proc: Linux only, null elsewhere or once it is gone.
 */
export async function treeCpuSeconds(pid: number): Promise<number | null> {
  const pids = [pid];
  let ticks = 0;
  try {
    for (let i = 0; i < pids.length; i++) {
      const stat = await readFile(`/proc/${pids[i]}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      ticks += Number(f[11]) + Number(f[12]); // utime, stime (fields 14 and 15)
      const children = await readFile(`/proc/${pids[i]}/task/${pids[i]}/children`, "utf8").catch(() => "");
      pids.push(...children.split(" ").filter(Boolean).map(Number));
    }
  } catch {
    return null;
  }
  return ticks / 100; // USER_HZ
}

/**
 * `total` calls of `run` kept `concurrency` at a time, after a warm-up of up to 50: calls/s,
 * p50/p95 latency, and CPU per call of this process and (when `serverCpuS` reads one) of the
 * server under test, e.g. `() => treeCpuSeconds(pid)`.
 */
export async function measureConcurrent(
  run: (i: number) => Promise<unknown>,
  opts: { concurrency: number; total: number; serverCpuS?: () => Promise<number | null> },
): Promise<{ perS: number; p50: number; p95: number; clientCpuMs: number; serverCpuMs: number | null }> {
  const { concurrency, total } = opts;
  const serverCpuS = opts.serverCpuS ?? (async () => null);
  await Promise.all(Array.from({ length: Math.min(concurrency, 50) }, (_, i) => run(i)));
  const lat: number[] = [];
  let next = 0;
  const cpu0 = process.cpuUsage();
  const server0 = await serverCpuS();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const i = next++;
        const t = performance.now();
        await run(i);
        lat.push(performance.now() - t);
      }
    }),
  );
  const s = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const server1 = await serverCpuS();
  return {
    perS: Math.round(total / s),
    p50: pct(lat, 50),
    p95: pct(lat, 95),
    clientCpuMs: (cpu.user + cpu.system) / 1000 / total,
    serverCpuMs: server0 === null || server1 === null ? null : ((server1 - server0) * 1000) / total,
  };
}

/** `p50 12 ms, p95 30 ms, max 41 ms (n=100)`: the summary most benches print per figure. */
export function summary(xs: number[], digits = 0, unit = "ms"): string {
  const f = (x: number) => `${x.toFixed(digits)} ${unit}`;
  return `p50 ${f(pct(xs, 50))}, p95 ${f(pct(xs, 95))}, max ${f(pct(xs, 100))} (n=${xs.length})`;
}

export function startBench<const O extends ParseArgsOptionsConfig = Record<never, never>>(spec: BenchSpec<O>) {
  let parsed: { values: Record<string, unknown>; positionals: string[] };
  try {
    parsed = parseArgs({
      args: process.argv.slice(2),
      options: { ...spec.options, ...COMMON },
      allowPositionals: spec.positionals ?? false,
      strict: true,
    });
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\nusage: ${spec.usage}\n`);
    process.exit(2);
  }
  const values = parsed.values as Values<O>;
  const positionals = parsed.positionals;
  if (values.help) {
    process.stdout.write(`usage: ${spec.usage}\n`);
    process.exit(0);
  }
  const json = values.json === true;
  const out = json ? process.stderr : process.stdout;
  const say = (line = "") => void out.write(`${line}\n`);
  return {
    /** The parsed flags (with their defaults). */
    args: values,
    positionals,
    json,
    /** A line for people (stdout, or stderr under `--json`). */
    say,
    /** Rows of cells, the first the head, as an aligned table for people. */
    table: (rows: Array<Array<string | number>>) => say(textTable(rows.map((r) => r.map(String)))),
    /** `load average 1.02 0.87 0.60`, for the line beside the figures. */
    load: () => `load average ${loadAverage().join(" ")}`,
    /** The figures for machines: printed as JSON under `--json` (with the load average), else nothing. */
    done: (figures: Record<string, unknown>) => {
      if (json) process.stdout.write(`${JSON.stringify({ ...figures, load_average: loadAverage() }, null, 2)}\n`);
    },
  };
}
