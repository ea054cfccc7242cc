/**
 * The bench harness as a bench meets it: `--json` makes stdout one JSON document (the lines for
 * people go to stderr), and a mistyped flag exits 2 with the usage instead of measuring defaults.
 * Driven through bench:run-path, the one bench that needs no services (a few seconds).
 */
import { execFile } from "node:child_process";
import { resolve } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
const run = (...args: string[]) =>
  promisify(execFile)(process.execPath, ["--import", "tsx", "tools/bench/run-path-data.ts", ...args], {
    cwd: ROOT,
  });

describe("bench harness", () => {
  it("--json: stdout is the figures and the load average as JSON, the table goes to stderr", async () => {
    const { stdout, stderr } = await run("--json");
    const figures = JSON.parse(stdout) as { runs: number; steps: Array<{ step: string }>; load_average: number[] };
    expect(figures.runs).toBe(7);
    expect(figures.steps.map((s) => s.step)).toContain("write_file 16 MiB: base64 content to bytes");
    expect(figures.load_average).toHaveLength(3);
    expect(stderr).toMatch(/^step +median ms +max ms$/m);
    expect(stderr).toMatch(/^load average /m);
  }, 60_000);

  it("a flag the bench does not take exits 2 with its usage", async () => {
    const err = await run("--jsn").then(
      () => null,
      (e: { code: number; stderr: string }) => e,
    );
    expect(err?.code).toBe(2);
    expect(err?.stderr).toContain("Unknown option '--jsn'");
    expect(err?.stderr).toContain("usage: npm run bench:run-path [-- --json]");
  }, 60_000);
});
