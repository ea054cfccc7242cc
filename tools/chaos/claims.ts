/**
 * `npm run chaos:claims [-- --jobs N --kills N --hosts N --seed S --short --verbose]`: the claims
 * invariant harness (harness.ts). Prints the seed, the faults that landed by kind, what the
 * hosts reported as fenced writes that missed, the classification of every job, and how many
 * jobs' event streams disagree with their rows; exits 1 on any anomaly or disagreement, or if the
 * checker's self-check could not detect a planted anomaly.
 * Replay a failure with the printed `--seed` (same schedule; OS interleavings still vary).
 */
import { parseArgs } from "node:util";
import { formatCounts } from "./checker";
import { FAULT_KINDS, runChaosClaims, totalKills } from "./harness";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    jobs: { type: "string" },
    kills: { type: "string" },
    hosts: { type: "string" },
    seed: { type: "string" },
    short: { type: "boolean", default: false },
    verbose: { type: "boolean", default: false },
  },
  strict: true,
});

const short = values.short;
const num = (v: string | undefined, d: number) => (v === undefined ? d : Number(v));
const seed = num(values.seed, Math.floor(Math.random() * 2 ** 31));
const opts = {
  jobs: num(values.jobs, short ? 80 : 600),
  kills: num(values.kills, short ? 10 : 60),
  hosts: num(values.hosts, 4),
  seed,
  faultEveryMs: short ? 900 : 1300,
  recoveryWindowMs: 20_000,
  apiShare: 0.2,
  log: values.verbose ? (l: string) => console.error(`  ${l}`) : undefined,
};
console.log(`chaos:claims seed=${seed} jobs=${opts.jobs} kills=${opts.kills} hosts=${opts.hosts}`);

const r = await runChaosClaims(opts);
console.log(`\nfaults landed (missed their window):`);
for (const k of FAULT_KINDS) console.log(`  ${k.padEnd(20)}${String(r.faults[k]).padStart(5)}  (${r.faultsMissed[k]})`);
console.log(`  kills dropped (no victim in any window) ${r.killsDropped}`);
console.log(`  ${"SIGKILLs".padEnd(20)}${String(totalKills(r.faults)).padStart(5)}; hosts spawned ${r.hostsSpawned}`);
console.log(
  `  hosts with a skewed wall clock: ${r.skewedHosts.ahead} ahead, ${r.skewedHosts.behind} behind (±30 s, libfaketime)`,
);
console.log(`host-reported fenced writes that missed (stale owners stopped):`);
for (const [k, v] of Object.entries(r.hostReports)) console.log(`  ${k.padEnd(24)}${String(v).padStart(5)}`);
console.log(
  `submitted: ${r.submitted.direct} direct, ${r.submitted.api} via API (${r.submitted.apiFailed} API failures)`,
);
console.log(`\n${formatCounts(r.check)}`);
for (const v of r.check.verdicts.filter((v) => v.reasons.length).slice(0, 20)) {
  console.log(`  ${v.cls} ${v.id}: ${v.reasons.join("; ")}`);
}
const selfOk = r.selfCheck.doubleStartDetected && r.selfCheck.staleWriteDetected;
console.log(
  `checker self-check on planted anomalies: double start ${r.selfCheck.doubleStartDetected ? "detected" : "MISSED"}, stale write ${r.selfCheck.staleWriteDetected ? "detected" : "MISSED"}`,
);
console.log(`streams compared with their rows: ${r.streams.checked}`);
for (const line of r.streams.examples) console.log(`  ${line}`);
console.log(`stream/row disagreements: ${r.streams.disagreements}`);
console.log(`seed=${seed} duration ${(r.durationMs / 1000).toFixed(1)} s`);
process.exit(r.check.anomalies === 0 && r.streams.disagreements === 0 && selfOk ? 0 : 1);
