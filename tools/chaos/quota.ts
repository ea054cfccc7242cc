/**
 * `npm run chaos:quota [-- --runs N --hosts N --kills N --seed S --limit N --cap N --max-runs N
 *  --heartbeat-ms N --no-stop-check --verbose]`: the global model quota under SIGKILL and SIGSTOP
 * (quota-harness.ts). Prints the seed, the counted invariants and every violation; exits 1 on any.
 * `--cap` below `--limit` gives the mock a smaller cap than the quota: the run must then fail (429s).
 * Replay a schedule with the printed `--seed` (same kill times and run mix; OS interleavings vary).
 */
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import {
  purgeLagMs,
  quotaViolations,
  runChaosQuota,
  SLOT_RETURN_TOLERANCE_MS,
  slotReturnBoundMs,
} from "./quota-harness";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    runs: { type: "string" },
    hosts: { type: "string" },
    kills: { type: "string" },
    seed: { type: "string" },
    limit: { type: "string" },
    cap: { type: "string" },
    "max-runs": { type: "string" },
    "heartbeat-ms": { type: "string" },
    "no-stop-check": { type: "boolean", default: false },
    verbose: { type: "boolean", default: false },
  },
  strict: true,
});

const num = (v: string | undefined, d: number) => (v === undefined ? d : Number(v));
const seed = num(values.seed, Math.floor(Math.random() * 2 ** 31));
const opts = {
  runs: num(values.runs, 100),
  hosts: num(values.hosts, 4),
  kills: num(values.kills, 6),
  seed,
  limit: num(values.limit, 8),
  mockCap: values.cap === undefined ? undefined : Number(values.cap),
  maxRunsPerHost: num(values["max-runs"], 8),
  heartbeatMs: num(values["heartbeat-ms"], 1500),
  streamMs: [300, 800] as [number, number],
  stopCheck: !values["no-stop-check"],
  recoveryWindowMs: 30_000,
  log: values.verbose ? (l: string) => console.error(`  ${l}`) : undefined,
};
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");
console.log(
  `chaos:quota seed=${seed} runs=${opts.runs} hosts=${opts.hosts} kills=${opts.kills} limit=${opts.limit} (mock cap ${opts.mockCap ?? opts.limit}, reject) max-runs/host=${opts.maxRunsPerHost} heartbeat=${opts.heartbeatMs} ms; load average ${load()}`,
);

const r = await runChaosQuota(opts);
const completed = r.outcomes.completed ?? 0;
const lost = r.outcomes.lost ?? 0;
const failed = Object.entries(r.outcomes).filter(([k]) => k.startsWith("failed:"));
console.log(
  `\nruns ${opts.runs}: completed ${completed}, lost ${lost}${failed.map(([k, n]) => `, ${k} ${n}`).join("")}`,
);
console.log(
  `kills ${r.kills} (${r.killsWithoutLease} found the victim holding no lease); hosts spawned ${r.hostsSpawned}; load ${(r.loadMs / 1000).toFixed(1)} s`,
);
console.log(
  `mock: requests ${r.mock.requests}, completed ${r.mock.completed}, aborted ${r.mock.aborted}, max concurrency ${r.mock.max_concurrency_seen} (cap ${r.mock.cap}), 429s ${r.mock.rejected_429}`,
);
console.log(
  `lease ZSET: max members ${r.maxLeasesSeen} (limit ${opts.limit}); live leases after the load ${r.liveLeasesAtEnd}; lease losses reported by hosts ${r.leaseLossesReported}`,
);
const bound = slotReturnBoundMs(r);
const measured = r.slotReturns.filter((s) => s.goneByMs !== null);
const gone = measured.map((s) => s.goneByMs as number).sort((a, b) => a - b);
// A negative lag: gone before it expired, i.e. released by a request the host sent just before it
// was frozen (the bridge runs in this process and may execute it a little later).
const lags = measured.map((s) => purgeLagMs(s, r.leaseTimeoutMs) as number).sort((a, b) => a - b);
const early = lags.filter((l) => l < 0).length;
console.log(
  `slot return after SIGKILL (freeze → gone from the ZSET, Redis clock; bound lease ${r.leaseTimeoutMs} + heartbeat ${r.heartbeatMs} = ${bound} ms, +${SLOT_RETURN_TOLERANCE_MS} ms polling tolerance):`,
);
console.log(
  `  ${measured.length} of ${r.slotReturns.length} leases measured; min ${gone[0] ?? "-"} ms, median ${gone[Math.floor(gone.length / 2)] ?? "-"} ms, max ${gone.at(-1) ?? "-"} ms; purged after expiry: median ${lags[Math.floor(lags.length / 2)] ?? "-"} ms, max ${lags.at(-1) ?? "-"} ms; released before expiry ${early}`,
);
if (values.verbose) {
  for (const s of r.slotReturns) {
    console.log(
      `  ${s.victim} ${s.holder}: renewed ${s.renewedBeforeFreezeMs} ms before the freeze, last seen +${s.lastSeenMs} ms, gone by +${s.goneByMs ?? "never"} ms (${purgeLagMs(s, r.leaseTimeoutMs) ?? "-"} ms after expiry)${s.contended ? "" : " (no waiter after expiry)"}`,
    );
  }
}
const sc = r.stopCheck;
if (sc) {
  console.log(
    `stop check: ${sc.host} frozen ${sc.frozenMs} ms holding a lease (age at SIGCONT ${sc.leaseAgeAtContMs ?? "purged"} ms, timeout ${sc.leaseTimeoutMs}); model requests by the run ${sc.requestsBeforeCont} before SIGCONT, ${sc.requestsAfter} in all; leases after SIGCONT ${sc.holdersAfterCont.join(", ") || "none"} (frozen ${sc.frozenHolder}${sc.frozenHeldAgain ? " HELD AGAIN" : ", never held again"}); turns ${sc.turnReasons.join(" → ")}; run ${sc.state} (${sc.errorCode ?? "-"}); events ${sc.events.join(" → ")}; input ${sc.inputStatus}`,
  );
}
const violations = quotaViolations(r);
console.log(violations.length ? `\nVIOLATIONS:\n  ${violations.join("\n  ")}` : "\nno violations");
console.log(`seed=${seed} duration ${(r.durationMs / 1000).toFixed(1)} s; load average ${load()}`);
process.exit(violations.length === 0 ? 0 : 1);
