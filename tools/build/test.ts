/**
 * `npm test`: typecheck, lint, then the unit, workers (inside workerd), integration (real
 * Postgres, Redis, workerd) and browser suites (the web console in Chromium on the same stack).
 * Ends with one plain summary line, "N passed, N failed", so a reader (or CI) sees the total
 * without scrolling. Any failing step fails the whole run.
 * `npm test -- unit integration` runs only the named steps; `npm test -- unit smoke` is the short
 * run CI makes on the older Node it still admits (.ci/run says why).
 */
import { spawn } from "node:child_process";
import { mkdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";

interface Step {
  name: string;
  cmd: string[];
  vitestJson?: string;
}

const out = join(".tmp", "test-results");
const vitest = (name: string, args: string[]): Step => {
  const json = join(out, `${name}.json`);
  return {
    name,
    cmd: ["npx", "vitest", "run", ...args, "--reporter=default", "--reporter=json", `--outputFile.json=${json}`],
    vitestJson: json,
  };
};

const ALL: Step[] = [
  { name: "typecheck", cmd: ["npm", "run", "-s", "typecheck"] },
  { name: "lint", cmd: ["npm", "run", "-s", "lint"] },
  vitest("unit", ["--project", "unit"]),
  vitest("workers", ["--config", "vitest.workers.config.ts"]),
  vitest("integration", ["--project", "integration"]),
  vitest("browser", ["--project", "browser"]),
];
/** Named only, never in the default run: the bundled host from a production install, and one job end to end. */
const NAMED_ONLY: Step[] = [
  vitest("smoke", ["--project", "integration", "test/integration/host-bundle.test.ts", "test/integration/e2e.test.ts"]),
];

/**
 * Runs a step, passing its output through, and keeps the lines that name errors vitest reports
 * outside any test (unhandled rejections and errors) so the summary can repeat them.
 */
function run(cmd: string[]): Promise<{ code: number; errors: string[] }> {
  return new Promise((resolve) => {
    const child = spawn(cmd[0] as string, cmd.slice(1), { stdio: ["inherit", "pipe", "pipe"] });
    const errors: string[] = [];
    let inUnhandled = false;
    const watch = (stream: NodeJS.ReadableStream, sink: NodeJS.WriteStream) => {
      let rest = "";
      stream.on("data", (d: Buffer) => {
        sink.write(d);
        const lines = (rest + d.toString("utf8")).split("\n");
        rest = lines.pop() ?? "";
        for (const raw of lines) {
          // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping ANSI colour codes
          const line = raw.replace(/\u001b\[[0-9;]*m/g, "").trim();
          if (/Unhandled (Errors|Rejection|Error)/.test(line)) inUnhandled = true;
          if (inUnhandled && errors.length < 12 && /(Error|originated in|latest test)/.test(line)) {
            errors.push(`      ${line.slice(0, 300)}`);
          }
        }
      });
    };
    watch(child.stdout, process.stdout);
    watch(child.stderr, process.stderr);
    child.on("exit", (code, signal) => resolve({ code: code ?? (signal ? 1 : 0), errors }));
    child.on("error", () => resolve({ code: 127, errors }));
  });
}

interface VitestJson {
  numPassedTests: number;
  numFailedTests: number;
  numPendingTests: number;
  numTodoTests: number;
  numTotalTests: number;
  testResults?: Array<{
    name: string;
    message?: string;
    assertionResults?: Array<{ fullName: string; status: string; failureMessages?: string[] }>;
  }>;
}

// A failure's first lines, without colour codes: CI keeps only the tail of the output, so the
// summary repeats what failed and why right above the totals.
const brief = (text: string, lines = 6): string =>
  text
    // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping ANSI colour codes
    .replace(/\u001b\[[0-9;]*m/g, "")
    .split("\n")
    .filter((l) => l.trim())
    .slice(0, lines)
    .map((l) => `      ${l.slice(0, 300)}`)
    .join("\n");
const failures: string[] = [];

const wanted = process.argv.slice(2);
const steps = wanted.length ? [...ALL, ...NAMED_ONLY].filter((s) => wanted.includes(s.name)) : ALL;
const unknown = wanted.filter((w) => ![...ALL, ...NAMED_ONLY].some((s) => s.name === w));
if (unknown.length) {
  console.error(
    `unknown step(s): ${unknown.join(", ")}; steps: ${[...ALL, ...NAMED_ONLY].map((s) => s.name).join(", ")}`,
  );
  process.exit(2);
}
console.log(`node ${process.version}`);
await rm(out, { recursive: true, force: true });
await mkdir(out, { recursive: true });

let passed = 0;
let failed = 0;
let skipped = 0;
const failedSteps: string[] = [];
for (const step of steps) {
  const t0 = Date.now();
  console.log(`\n▶ ${step.name}: ${step.cmd.join(" ")}`);
  const { code, errors } = await run(step.cmd);
  if (errors.length) failures.push(`  ${step.name}: errors outside any test\n${errors.join("\n")}`);
  if (step.vitestJson) {
    try {
      const r = JSON.parse(await readFile(step.vitestJson, "utf8")) as VitestJson;
      passed += r.numPassedTests;
      failed += r.numFailedTests;
      skipped += r.numPendingTests + r.numTodoTests;
      if (r.numTotalTests === 0) failedSteps.push(`${step.name} (ran no test)`);
      for (const file of r.testResults ?? []) {
        const rel = file.name.replace(`${process.cwd()}/`, "");
        if (file.message) failures.push(`  ${step.name} ${rel}: file failed\n${brief(file.message)}`);
        for (const a of file.assertionResults ?? []) {
          if (a.status !== "failed") continue;
          failures.push(`  ${step.name} ${rel} › ${a.fullName}\n${brief((a.failureMessages ?? []).join("\n"))}`);
        }
      }
    } catch {
      failedSteps.push(`${step.name} (no results)`);
    }
  }
  if (code !== 0) failedSteps.push(`${step.name} (exit ${code})`);
  console.log(
    `◀ ${step.name}: ${code === 0 ? "ok" : `FAILED (exit ${code})`} in ${((Date.now() - t0) / 1000).toFixed(1)} s`,
  );
}

console.log("");
if (failures.length) console.log(`failures:\n${failures.slice(0, 20).join("\n")}`);
if (failedSteps.length) console.log(`failed steps: ${failedSteps.join(", ")}`);
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failedSteps.length || failed ? 1 : 0);
