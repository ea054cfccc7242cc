/**
 * The reaper's recovery statements, run by the Worker's cron trigger so that ending a job never
 * depends on a live sandbox-host: with no host alive, a silent run still becomes `lost`, an
 * overdue one `timed_out`, a claim that never started is released, and a wait past its deadline
 * ends as the agent configured (denied and re-queued, or failed `approval_expired`).
 *
 * These are the very statements every host's reaper runs (src/db/reaper-repo.ts). Each is one
 * conditional UPDATE that re-checks its condition on the row it changes (`state = 'running'` and
 * the heartbeat/deadline test; `state = 'queued'`, an owner, an old `claimed_at`, not started),
 * so the cron racing any number of hosts' reapers, or a run's owner, changes each row at most once:
 * the loser's UPDATE matches zero rows. Running it when there is nothing to do changes nothing.
 *
 * It does not rebuild the ready index: that is an accelerator hosts keep for themselves, and with
 * no host alive there is nobody to wake.
 */
import { reapRuns, releaseStaleClaims } from "../../src/db/reaper-repo";
import { expireWaits } from "../../src/db/wait-repo";
import { redisKeys } from "../../src/quota/keys";
import { accelerate } from "../commands/redis-accelerator";
import { callDependency } from "../deps";
import { log } from "../log";
import type { BackstopTask } from "../scheduled";

const keys = redisKeys();

export const reaperBackstop: BackstopTask = {
  name: "reaper",
  async run({ config, deps }) {
    const db = deps.db();
    const released = await callDependency("postgres", () => releaseStaleClaims(db, config.backstop.claimTimeoutMs));
    if (released.length > 0) {
      log.warn("cron backstop released claims that never started", { jobs: released.map((r) => r.id) });
      // Only a wake-up for hosts (they also sweep Postgres); a Redis failure is logged, not raised.
      const [first, ...rest] = released.map((r) => ({ score: r.createdAt.getTime(), member: r.id }));
      if (first)
        await accelerate(deps, (redis) => redis.zadd(keys.readyIndex(), first, ...rest), {
          msg: "released claims not re-indexed",
          fields: { jobs: released.length },
        });
    }
    const expired = await callDependency("postgres", () => expireWaits(db));
    if (expired.requeued.length + expired.failed.length > 0) {
      log.warn("cron backstop ended waits past their deadline", {
        denied: expired.requeued.map((r) => r.id),
        failed: expired.failed,
      });
    }
    const reaped = await callDependency("postgres", () => reapRuns(db, config.backstop.runLostAfterMs));
    for (const r of reaped) {
      log.warn(`cron backstop: run ${r.state === "lost" ? "lost (owner stopped heartbeating)" : "timed out"}`, {
        job_id: r.id,
        execution_id: r.executionId,
      });
    }
    return {
      released: released.length,
      lost: reaped.filter((r) => r.state === "lost").length,
      timed_out: reaped.filter((r) => r.state === "timed_out").length,
      waits_denied: expired.requeued.length,
      waits_failed: expired.failed.length,
    };
  },
};
