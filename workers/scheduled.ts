/**
 * The Worker's `scheduled` handler: backstop tasks run on the cron trigger in wrangler.toml (every
 * minute). They do what hosts normally do, so that nothing waits for a live host; each is
 * idempotent and safe alongside the hosts doing the same. One more backstop is one more entry in
 * BACKSTOP_TASKS.
 *
 * While a host sleeps (sandbox-host/lifecycle/sleep.ts, registered in Redis until its known
 * deadline) the invocation sends Postgres nothing: that host's last look found nothing claimed,
 * running or waiting anywhere and nothing due before it wakes, and whatever makes work since has
 * poked it (src/quota/fleet-wake.ts, which also empties the registrations, so the next invocation
 * runs the tasks). One Redis command a minute instead of a Postgres sweep that would keep a Neon
 * compute from ever suspending. A registration outlives a dead host by its planned sleep at most;
 * when Redis does not answer, the tasks run.
 */

import { anySleeper } from "../src/quota/fleet-wake";
import { redisKeys } from "../src/quota/keys";
import type { BackstopTask } from "./cron/backstop-task";
import { blobCollection } from "./cron/blob-collection";
import { expiryBackstop } from "./cron/expiry-backstop";
import { reaperBackstop } from "./cron/reaper-backstop";
import { retentionBackstop } from "./cron/retention-backstop";
import { scheduleBackstop } from "./cron/schedule-backstop";
import { createDeps, type Deps, withTimeout } from "./deps";
import type { Env } from "./env";
import { type GatewayConfig, loadConfig } from "./gateway-config";
import { log } from "./log";

export const BACKSTOP_TASKS: readonly BackstopTask[] = [
  reaperBackstop,
  retentionBackstop,
  scheduleBackstop,
  expiryBackstop,
  blobCollection,
];

/**
 * Runs every task, each to the end whatever the others do, then fails the invocation if any
 * failed, so the Cron Events view and `wrangler tail` show it as an error.
 */
export async function runBackstops(
  env: Env,
  cron: string,
  tasks: readonly BackstopTask[] = BACKSTOP_TASKS,
): Promise<void> {
  let config: GatewayConfig;
  try {
    config = loadConfig(env);
  } catch (err) {
    log.error("cron backstop not run: invalid configuration", { cron, error: err });
    throw err;
  }
  const deps = createDeps(config);
  if (await hostAsleep(deps)) return;
  const results = await Promise.allSettled(tasks.map((t) => t.run({ config, deps, env })));
  const failed: string[] = [];
  results.forEach((r, i) => {
    const task = (tasks[i] as BackstopTask).name;
    if (r.status === "rejected") {
      failed.push(task);
      log.error("cron backstop task failed", { cron, task, error: r.reason });
    } else if (Object.values(r.value).some((n) => n > 0)) {
      log.info("cron backstop task acted", { cron, task, ...r.value });
    }
  });
  if (failed.length > 0) throw new Error(`cron backstop tasks failed: ${failed.join(", ")}`);
}

/** Whether a host sleeps with a sleep not yet over; false when Redis does not say (the tasks then run). */
async function hostAsleep(deps: Deps): Promise<boolean> {
  try {
    return await withTimeout(anySleeper(deps.redis(), redisKeys()), 1000, "redis");
  } catch {
    return false;
  }
}
