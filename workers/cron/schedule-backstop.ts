/**
 * Schedule ticks fired by the Worker's cron trigger too (every minute), so a schedule does not
 * depend on a live sandbox-host to make its jobs: with no host, a tick's job is made at most
 * ~a minute late and waits, queued, for a host. It is the same statement the hosts' schedulers
 * run (src/db/schedules-repo.ts), so the cron racing them makes no second job for a tick.
 */
import { fireDueSchedules } from "../../src/db/schedules-repo";
import { callDependency } from "../deps";
import { log } from "../log";
import type { BackstopTask } from "./backstop-task";

export const scheduleBackstop: BackstopTask = {
  name: "schedules",
  async run({ config, deps }) {
    const db = deps.db();
    // Each tick's job is admitted as a POST /v1/jobs is, by the gateway's models and queue cap.
    const rules = { models: config.models, maxQueued: config.limits.maxQueuedJobsPerTenant };
    const { fired } = await callDependency("postgres", () =>
      fireDueSchedules(db, rules, { warn: (msg, fields) => log.warn(`cron backstop: ${msg}`, fields) }),
    );
    return { ticks_fired: fired.filter((f) => f.jobId !== null).length };
  },
};
