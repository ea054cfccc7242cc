/**
 * The Postgres purge of finished jobs past their retention, run by the Worker's cron trigger too,
 * so that retention, like recovery, does not depend on a live sandbox-host (hosts run the same
 * purge: sandbox-host/reaper/retention.ts, `HOST_PURGE_MS`). Each batch locks its
 * jobs with SKIP LOCKED and deletes only jobs that are finished and old enough, so the cron and
 * any number of hosts purging at once delete each job once; with nothing to purge it changes
 * nothing. Bounded per run (the repo's batch size × batch count), so one invocation stays short.
 */
import { purgeFinishedJobs } from "../../src/db/retention-repo";
import { callDependency } from "../deps";
import type { BackstopTask } from "./backstop-task";

export const retentionBackstop: BackstopTask = {
  name: "retention",
  async run({ config, deps }) {
    const db = deps.db();
    const { purged, batches } = await callDependency("postgres", () =>
      purgeFinishedJobs(db, { olderThanMs: config.jobRetentionS * 1000 }),
    );
    return { purged, batches };
  },
};
