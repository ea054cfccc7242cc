/**
 * Group commit for the started CAS (group-commit.ts). Runs that reach their start at the same
 * moment (a claim pass that won several jobs, or a busy host) share one `markStartedMany`
 * statement. Each start still gets its own answer: whether its own full claim identity hit, and
 * when the statement that carried it was sent (`sentAt`, performance.now()): the run's lease
 * counts from there (ActiveRun.start), not from when the start joined the queue, so time spent
 * behind an earlier batch does not eat into the lease.
 */
import type { Db } from "../../src/db/client";
import { markStartedMany } from "../../src/db/ownership-repo";
import type { ExecutionIdentity } from "../../src/domain/identity";
import { GroupCommit } from "./group-commit";

export interface StartAnswer {
  started: boolean;
  sentAt: number;
}

export class StartBatcher {
  private readonly commit: GroupCommit<ExecutionIdentity, StartAnswer>;

  /** `db`: the lease's connection (host-parts.ts heartbeatPool), which no run statement queues on. */
  constructor(db: Db, maxBatch = 64) {
    this.commit = new GroupCommit(async (ids) => {
      const sentAt = performance.now();
      const started = await markStartedMany(db, ids);
      return ids.map((id) => ({ started: started.has(id.executionId), sentAt }));
    }, maxBatch);
  }

  start(id: ExecutionIdentity): Promise<StartAnswer> {
    return this.commit.submit(id);
  }
}
