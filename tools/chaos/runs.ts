/**
 * `npm run chaos:runs [-- --jobs N --faults N --hosts N --forks N --seed S --short --verbose]`: the run
 * chaos harness (runs-harness.ts): jobs that stream, charge, look up, wait for an approval and
 * delegate, while hosts are SIGKILLed mid-stream, mid-tool, mid-resume and mid-delegation,
 * SIGTERMed (a deploy), cut off from Postgres, and the whole fleet restarted once. Prints the
 * faults that landed, the tool calls the MCP server saw, and every job's class; exits 1 on any
 * anomaly. Forks and replays of the load's jobs are made meanwhile (`--forks`, default a tenth of
 * the jobs; runs-forks.ts): the source journals' rows changed, the prefix calls made again, the
 * forks' recoveries not their own are printed and must be 0.
 * Replay with the printed `--seed` (same schedule; OS interleavings still vary).
 */
import { parseArgs } from "node:util";
import { formatRunCounts } from "./runs-checker";
import { formatForkCheck } from "./runs-forks";
import { JOB_KINDS, RUN_FAULT_KINDS, runChaosRuns } from "./runs-harness";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    jobs: { type: "string" },
    faults: { type: "string" },
    hosts: { type: "string" },
    forks: { type: "string" },
    seed: { type: "string" },
    short: { type: "boolean", default: false },
    verbose: { type: "boolean", default: false },
  },
  strict: true,
});
const num = (v: string | undefined, d: number) => (v === undefined ? d : Number(v));
const short = values.short;
const seed = num(values.seed, Math.floor(Math.random() * 2 ** 31));
const jobs = num(values.jobs, short ? 60 : 2000);
const opts = {
  jobs,
  faults: num(values.faults, short ? 8 : 200),
  hosts: num(values.hosts, 4),
  seed,
  forks: num(values.forks, Math.ceil(jobs / 10)),
  faultEveryMs: short ? 1200 : 900,
  recoveryWindowMs: 30_000,
  log: values.verbose ? (l: string) => console.error(`  ${l}`) : undefined,
};
console.log(`chaos:runs seed=${seed} jobs=${opts.jobs} faults=${opts.faults} hosts=${opts.hosts} forks=${opts.forks}`);
const r = await runChaosRuns(opts);
console.log("\nfaults landed (found no victim):");
for (const k of RUN_FAULT_KINDS)
  console.log(`  ${k.padEnd(22)}${String(r.faults[k]).padStart(5)}  (${r.faultsMissed[k]})`);
console.log(`  hosts spawned ${r.hostsSpawned}`);
console.log(`jobs submitted: ${JOB_KINDS.map((k) => `${k} ${r.submitted[k]}`).join(", ")}; children ${r.children}`);
console.log(
  `tool calls the MCP server saw: charge ${r.toolCalls.charge}, lookup ${r.toolCalls.lookup} (${r.toolCalls.aborted} aborted by their caller)`,
);
console.log(`streams read: ${r.streamsRead}`);
console.log(`\n${formatRunCounts(r.check)}`);
for (const v of r.check.verdicts.filter((v) => v.reasons.length).slice(0, 20)) {
  console.log(`  ${v.cls} ${v.id}: ${v.reasons.join("; ")}`);
}
if (r.forks) {
  console.log(`\n${formatForkCheck(r.forks)}`);
  for (const d of r.forks.detail.slice(0, 20)) console.log(`  ${d}`);
}
console.log(`seed=${seed} duration ${(r.durationMs / 1000).toFixed(1)} s`);
process.exit(r.check.anomalies === 0 && (r.forks?.anomalies ?? 0) === 0 ? 0 : 1);
