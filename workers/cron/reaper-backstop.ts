/**
 * The recovery pass (src/db/recovery-pass.ts), run by the Worker's cron trigger so that ending a
 * job never depends on a live sandbox-host: with no host alive, a silent run still becomes
 * `lost`, an overdue one `timed_out`, a claim that never started is released, and a wait past its
 * deadline ends as the agent configured (denied and re-queued, or failed `approval_expired`).
 *
 * It is the very pass every host's reaper runs, so the cron racing any number of hosts' reapers,
 * or a run's owner, changes each row at most once, and running it with nothing to do changes
 * nothing. Like a host, it re-indexes what it re-queued, released claims and denied waits alike
 * (it used to skip the waits): the cron fires whether or not hosts are alive, and a live host
 * that cannot LISTEN (behind a Neon pooler URL, so no ear_ready NOTIFY reaches it) learns of a
 * claimable job from the ready index, or else from its Postgres sweep seconds later. The write is
 * one bounded Upstash command, sent only when something was re-queued; its failure is logged.
 *
 * It does not rebuild the whole ready index: that is an accelerator hosts keep for themselves,
 * and with no host alive there is nobody to wake.
 */
import { recoveryPass } from "../../src/db/recovery-pass";
import { redisKeys } from "../../src/quota/keys";
import { indexReady } from "../../src/quota/ready-index";
import { accelerate } from "../commands/redis-accelerator";
import { callDependency } from "../deps";
import { log } from "../log";
import type { BackstopTask } from "./backstop-task";

const keys = redisKeys();

/** The pass's lines, marked as the cron's so they are told apart from the hosts' in one log view. */
const cronLog = {
  info: (msg: string, fields?: Record<string, unknown>) => log.info(`cron backstop: ${msg}`, fields),
  warn: (msg: string, fields?: Record<string, unknown>) => log.warn(`cron backstop: ${msg}`, fields),
};

export const reaperBackstop: BackstopTask = {
  name: "reaper",
  async run({ config, deps }) {
    const outcome = await callDependency("postgres", () =>
      recoveryPass({
        db: deps.db(),
        log: cronLog,
        limits: config.backstop,
        // Only a wake-up for hosts (they also sweep Postgres); a Redis failure is logged, not raised.
        reindex: (jobs) =>
          accelerate(deps, (redis) => indexReady(redis, keys.readyIndex(), jobs), {
            msg: "cron backstop: re-queued jobs not re-indexed",
            fields: { jobs: jobs.length },
          }),
      }),
    );
    return {
      released: outcome.released.length,
      lost: outcome.reaped.filter((r) => r.state === "lost").length,
      timed_out: outcome.reaped.filter((r) => r.state === "timed_out").length,
      recovered: outcome.reaped.filter((r) => r.state === "recovered").length,
      waits_denied: outcome.waitsDenied.length,
      waits_failed: outcome.waitsFailed.length,
    };
  },
};
