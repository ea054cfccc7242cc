/**
 * `npm run bench:scale-to-zero [-- --minutes 5 --hosts 2]`: a sleeping fleet for the full window a
 * Neon compute waits before it suspends (5 minutes), at the default HOST_WAKE_POLL_MS (60 s), and
 * the wake-up after it. What is measured and how: tools/lib/scale-to-zero.ts; the figures
 * and their reading: docs/deploy.md, "Idle and scale to zero".
 */
import { availableParallelism } from "node:os";
import { runScaleToZero } from "../lib/scale-to-zero";
import { startBench } from "./harness";

const bench = startBench({
  usage: "npm run bench:scale-to-zero -- [--minutes 5] [--hosts 2] [--json]",
  options: { minutes: { type: "string" }, hosts: { type: "string" } },
});
const MINUTES = Number(bench.args.minutes ?? 5);
const HOSTS = Number(bench.args.hosts ?? 2);

async function main(): Promise<void> {
  const r = await runScaleToZero({
    hosts: HOSTS,
    windowMs: MINUTES * 60_000,
    progress: (line) => console.error(`bench:scale-to-zero — ${line}`),
  });
  bench.say(
    `\nbench:scale-to-zero — ${r.hosts} sleeping hosts, ${r.windowS.toFixed(0)} s window after terminating ${r.terminated} sessions; ` +
      `${availableParallelism()} cores; load average ${r.load.atStart.join(" / ")} at the start, ${r.load.atEnd.join(" / ")} at the end\n`,
  );
  bench.table([
    ["measure", "in the window", "per host per minute"],
    ["Postgres statements (pg_stat_statements)", r.statements, (r.statements / r.hosts / (r.windowS / 60)).toFixed(3)],
    ["Postgres transactions (pg_stat_database)", r.transactions, ""],
    ["Postgres sessions opened (pg_stat_database)", r.sessions, ""],
    ["Postgres sessions at the end (pg_stat_activity)", r.liveSessions, ""],
    ["Redis commands (INFO commandstats)", r.redisCommands, (r.redisCommands / r.hosts / (r.windowS / 60)).toFixed(3)],
  ]);
  bench.say(`Redis commands by name: ${JSON.stringify(r.redisByCommand)}`);
  if (r.statements > 0) bench.say(`Postgres statements: ${JSON.stringify(r.statementTexts)}`);
  bench.say(`\nwake-up: enqueue→started ${r.wakeMs.toFixed(1)} ms after the window`);
  if (r.hostProblems.length > 0) bench.say(`host warnings/errors:\n${r.hostProblems.join("\n")}`);
  bench.done({ ...r });
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
