/**
 * Group commit for the terminal write (group-commit.ts), as StartBatcher does it for the started
 * CAS. Runs that end at the same moment (a busy host: many short runs in flight) share one
 * `finishJobsMany` statement. Each run still gets its own answer — whether its own full
 * execution identity hit — so one stale run in a batch misses alone while the others land. A
 * failed statement (Postgres unreachable) rejects every run in it: none of them was written,
 * since the batch is one statement, and the reaper decides as for a single failed write.
 */
import type { Db } from "../../src/db/client";
import { type Finish, type FinishResult, finishJobsMany } from "../../src/db/ownership-repo";
import { GroupCommit } from "./group-commit";

export class FinishBatcher {
  private readonly commit: GroupCommit<Finish, FinishResult>;

  constructor(db: Db, maxBatch = 64) {
    this.commit = new GroupCommit((finishes) => finishJobsMany(db, finishes), maxBatch);
  }

  finish(finish: Finish): Promise<FinishResult> {
    return this.commit.submit(finish);
  }
}
