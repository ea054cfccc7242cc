/**
 * The stack's own Node services as child processes (tools/stack/services/child-service.ts) and
 * the bridges' `--workers N` (tools/bridges/workers.ts): a start that fails says which service
 * and what it printed, a stop leaves no process behind, N workers answer on one port.
 */
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { startChildService } from "../../tools/stack/services/child-service";

const ROOT = join(import.meta.dirname, "..", "..");

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** `pid` and its descendants, from /proc. */
async function tree(pid: number): Promise<number[]> {
  const { readFile } = await import("node:fs/promises");
  const out = [pid];
  for (let i = 0; i < out.length; i++) {
    const children = await readFile(`/proc/${out[i]}/task/${out[i]}/children`, "utf8").catch(() => "");
    out.push(...children.split(" ").filter(Boolean).map(Number));
  }
  return out;
}

describe("child services", () => {
  it("a service that exits before its ready line fails the start with its name and what it printed", async () => {
    const start = startChildService({
      name: "the broken service",
      cwd: ROOT,
      argv: ["-e", "console.error('cannot listen: EADDRINUSE'); process.exit(3)"],
      ready: (line) => (line.startsWith("ready ") ? line.slice(6) : null),
    });
    await expect(start).rejects.toThrow(
      /the broken service exited \(3\) before it was ready; it printed:\ncannot listen: EADDRINUSE/,
    );
  });

  it("a silent service fails the start after the timeout and is stopped", async () => {
    let pid = 0;
    const start = startChildService({
      name: "the silent service",
      cwd: ROOT,
      argv: ["-e", "console.log(process.pid); setInterval(() => {}, 1000)"],
      ready: (line) => {
        pid = Number(line);
        return null;
      },
      readyTimeoutMs: 1500,
    });
    await expect(start).rejects.toThrow(/the silent service did not report ready in 1.5 s/);
    expect(pid).toBeGreaterThan(0);
    expect(alive(pid)).toBe(false);
  });

  it("the pg bridge with --workers 2 answers on one port from two processes, and a stop ends all three", async () => {
    const bridge = await startChildService({
      name: "the pg bridge",
      cwd: ROOT,
      argv: ["--import", "tsx", "tools/bridges/pg-proxy/main.ts", "--port", "0", "--workers", "2"],
      // Nothing listens there: /healthz does not touch Postgres.
      env: { DATABASE_URL: "postgres://u:p@127.0.0.1:1/db" },
      ready: (line) => /listening on (\S+)/.exec(line)?.[1] ?? null,
    });
    const pids = await tree(bridge.process.pid as number);
    try {
      expect(pids.length, "the primary and its two workers").toBe(3);
      const answers = await Promise.all(
        Array.from({ length: 20 }, () => fetch(`${bridge.value}/healthz`, { headers: { connection: "close" } })),
      );
      expect(answers.map((r) => r.status)).toEqual(Array(20).fill(200));
    } finally {
      await bridge.stop();
    }
    expect(pids.filter(alive)).toEqual([]);
  }, 60_000);
});
