/**
 * The expiry sweep (src/db/admission-repo.ts `expireOverdue`), run by the Worker's cron trigger
 * too: a queued job past its `ttl_s` ends `expired` even with no sandbox-host alive (hosts run the
 * same sweep: sandbox-host/reaper/expiry.ts). The claim never takes such a job, so without this a fleet of
 * zero hosts would leave it `queued` for good. Each statement locks its jobs SKIP LOCKED and
 * re-checks them on the row, so the cron and any number of hosts expire each job once; the
 * terminal event `run.expired` is projected from the row, as for a host's sweep.
 */
import { EXPIRE_BATCH, expireOverdue } from "../../src/db/admission-repo";
import { callDependency } from "../deps";
import type { BackstopTask } from "./backstop-task";

/** Statements per run (each at most the sweep's batch): one invocation stays short after an outage. */
const MAX_SWEEPS = 4;

export const expiryBackstop: BackstopTask = {
  name: "expiry",
  async run({ deps }) {
    const db = deps.db();
    let expired = 0;
    for (let i = 0; i < MAX_SWEEPS; i++) {
      const ids = await callDependency("postgres", () => expireOverdue(db));
      expired += ids.length;
      if (ids.length < EXPIRE_BATCH) break;
    }
    return { expired };
  },
};
