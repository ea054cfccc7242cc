/**
 * The Worker's scheduled handler inside workerd, with Postgres and Redis down (this suite's URLs
 * point at a closed port): the reaper backstop fails as "postgres is unavailable", the failure is
 * logged, the other tasks still run, and the invocation fails so Cron Events show it. The
 * success path against a real Postgres is test/integration/cron-backstop.test.ts.
 */
import { createScheduledController } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { BackstopTask } from "../../workers/cron/backstop-task";
import type { Env } from "../../workers/env";
import worker from "../../workers/index";
import { BACKSTOP_TASKS, runBackstops } from "../../workers/scheduled";

const testEnv = env as unknown as Env;

describe("the scheduled handler", () => {
  afterEach(() => vi.restoreAllMocks());

  it("fails the invocation and logs why when Postgres is unreachable", async () => {
    const errors = vi.spyOn(console, "error");
    await expect(worker.scheduled(createScheduledController({ cron: "* * * * *" }), testEnv)).rejects.toThrow(
      /cron backstop tasks failed: reaper/,
    );
    const lines = errors.mock.calls.map((c) => JSON.parse(String(c[0])) as Record<string, unknown>);
    expect(lines).toContainEqual(
      expect.objectContaining({ msg: "cron backstop task failed", task: "reaper", cron: "* * * * *" }),
    );
    expect(String(lines.find((l) => l.task === "reaper")?.error)).toMatch(/postgres is unavailable/);
  });

  it("runs every task even when one fails", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    let ran = false;
    const after: BackstopTask = {
      name: "after",
      run: async () => {
        ran = true;
        return {};
      },
    };
    await expect(runBackstops(testEnv, "* * * * *", [...BACKSTOP_TASKS, after])).rejects.toThrow(/reaper/);
    expect(ran).toBe(true);
  });
});
