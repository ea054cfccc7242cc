/**
 * `npm run load` (`node --import tsx tools/load/main.ts`): real HTTP + SSE load against the
 * local stack, 1 → 100 concurrent virtual users, strict causal checks, resource peaks, an
 * offline HTML report. See docs/capacity.md.
 *
 *   npm run load                                   # against `npm run dev` (.dev/stack.json)
 *   npm run load -- --scenarios text,tool,cancel,reconnect --steps 1,10,20,50,100
 *   npm run load -- --self-start --steps 100,300,1000 --client-procs 4
 *   npm run load -- --self-start --hosts 4 --host-max-runs 32
 *   npm run load -- --self-start --hosts 4 --host-max-runs 8 --baseline pinned --no-ladder
 *   npm run load -- --gateway http://127.0.0.1:8787 --api-key ear_… [--database-url …] [--redis-url …] [--metrics-url …]
 *
 * Exit code: 0 when every run was strictly successful and every resource returned to its
 * baseline, 1 otherwise, 2 for bad arguments.
 */
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { runLoad } from "./runner";
import { summaryText } from "./table";
import { SCENARIOS, type Scenario } from "./types";

const HELP = `usage: npm run load -- [options]
  --steps 1,10,20,50,100      concurrent virtual users per step
  --scenarios text            any of text,tool,cancel,reconnect (comma separated)
  --ttft-ms 200 --tokens-per-s 50 --reply-tokens 100   the mock model script of every run
  --run-timeout-ms 120000     per run, submit → terminal state read back
  --settle-ms 60000           max wait for resources to return to baseline
  --client-procs auto         processes the VUs of a step run in: 0 = this process, N = N forked
                              clients; auto = 1 below 300 VUs, then one per 250 VUs (at most 8)
  --out .load-results         results folder (a timestamped subfolder per run)
  target (default: .dev/stack.json from \`npm run dev\`):
  --stack-file PATH | --gateway URL --api-key KEY [--database-url URL] [--redis-url URL] [--metrics-url URL]...
  --self-start [--hosts 4] [--host-max-runs 32] [--mock-max-concurrency N]   start and stop a stack of its own
  --baseline pinned [--baseline-jobs N] [--pin-skew 0.5] [--host-capacity C] [--no-ladder]
  --no-progress, --json (print results.json path only)`;

function fail(msg: string): never {
  console.error(`${msg}\n\n${HELP}`);
  process.exit(2);
}

function int(name: string, v: string | undefined, def: number, min = 0): number {
  if (v === undefined) return def;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) fail(`--${name} must be an integer ≥ ${min}, got "${v}"`);
  return n;
}

let args: ReturnType<typeof parse>;
function parse() {
  return parseArgs({
    options: {
      steps: { type: "string" },
      scenarios: { type: "string" },
      scenario: { type: "string" },
      "ttft-ms": { type: "string" },
      "tokens-per-s": { type: "string" },
      "reply-tokens": { type: "string" },
      "run-timeout-ms": { type: "string" },
      "settle-ms": { type: "string" },
      "client-procs": { type: "string" },
      out: { type: "string" },
      "stack-file": { type: "string" },
      gateway: { type: "string" },
      "api-key": { type: "string" },
      "database-url": { type: "string" },
      "redis-url": { type: "string" },
      "metrics-url": { type: "string", multiple: true },
      "self-start": { type: "boolean" },
      hosts: { type: "string" },
      "host-max-runs": { type: "string" },
      "mock-max-concurrency": { type: "string" },
      baseline: { type: "string" },
      "baseline-jobs": { type: "string" },
      "pin-skew": { type: "string" },
      "host-capacity": { type: "string" },
      "no-ladder": { type: "boolean" },
      "no-progress": { type: "boolean" },
      json: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
    allowPositionals: false,
  });
}
try {
  args = parse();
} catch (err) {
  fail((err as Error).message);
}
const v = args.values;
if (v.help) {
  console.log(HELP);
  process.exit(0);
}

const steps = (v.steps ?? "1,10,20,50,100").split(",").map((s) => int("steps", s.trim(), 0, 1));
const scenarios = (v.scenarios ?? v.scenario ?? "text").split(",").map((s) => s.trim()) as Scenario[];
for (const s of scenarios) if (!SCENARIOS.includes(s)) fail(`unknown scenario "${s}" (one of ${SCENARIOS.join(", ")})`);
if (v.baseline !== undefined && v.baseline !== "pinned") fail(`--baseline must be "pinned"`);
const skew = v["pin-skew"] === undefined ? 0.5 : Number(v["pin-skew"]);
if (!(skew >= 0 && skew <= 1)) fail("--pin-skew must be between 0 and 1");
if (v.gateway && !v["api-key"]) fail("--gateway needs --api-key");
const clientProcs =
  v["client-procs"] === undefined || v["client-procs"] === "auto"
    ? "auto"
    : int("client-procs", v["client-procs"], 0, 0);

const outcome = await runLoad({
  root: resolve(process.cwd()),
  stackFile: v["stack-file"],
  gatewayUrl: v.gateway,
  apiKey: v["api-key"],
  databaseUrl: v["database-url"],
  redisUrl: v["redis-url"],
  metricsUrls: v["metrics-url"],
  selfStart: v["self-start"]
    ? {
        hosts: int("hosts", v.hosts, 4, 1),
        maxRuns: int("host-max-runs", v["host-max-runs"], 32, 1),
        mockMaxConcurrency: v["mock-max-concurrency"]
          ? int("mock-max-concurrency", v["mock-max-concurrency"], 0, 1)
          : undefined,
      }
    : null,
  steps,
  scenarios,
  script: {
    ttftMs: int("ttft-ms", v["ttft-ms"], 200),
    tokensPerS: int("tokens-per-s", v["tokens-per-s"], 50),
    replyTokens: int("reply-tokens", v["reply-tokens"], 100, 2),
  },
  runTimeoutMs: int("run-timeout-ms", v["run-timeout-ms"], 120_000, 1000),
  settleMs: int("settle-ms", v["settle-ms"], 60_000),
  outRoot: v.out,
  progress: !v["no-progress"] && !v.json,
  baseline:
    v.baseline === "pinned"
      ? {
          mode: "pinned",
          skew,
          jobs: v["baseline-jobs"] ? int("baseline-jobs", v["baseline-jobs"], 0, 1) : undefined,
          hostCapacity: v["host-capacity"] ? int("host-capacity", v["host-capacity"], 0, 1) : undefined,
        }
      : null,
  skipLadder: !!v["no-ladder"],
  clientProcs,
}).catch((err: unknown) => {
  console.error(`load: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});

if (v.json) console.log(outcome.resultsPath);
else {
  console.log(summaryText(outcome.results));
  console.log(`\nresults: ${outcome.resultsPath}\nreport:  ${outcome.reportPath}`);
  console.log(
    outcome.ok ? "strict: every run passed and everything returned to baseline" : "strict: FAILED (see above)",
  );
}
process.exit(outcome.ok ? 0 : 1);
