/**
 * Group commit for the started CAS (group-commit.ts). Runs that reach their start at the same
 * moment (a claim pass that won several jobs, or a busy host) share one `markStartedMany`
 * statement. Each start still gets its own answer: whether its own full claim identity hit.
 */
import type { Db } from "../../src/db/client";
import { markStartedMany } from "../../src/db/ownership-repo";
import type { ExecutionIdentity } from "../../src/domain/identity";
import { GroupCommit } from "./group-commit";

export class StartBatcher {
  private readonly commit: GroupCommit<ExecutionIdentity, boolean>;

  constructor(db: Db, maxBatch = 64) {
    this.commit = new GroupCommit(async (ids) => {
      const started = await markStartedMany(db, ids);
      return ids.map((id) => started.has(id.executionId));
    }, maxBatch);
  }

  start(id: ExecutionIdentity): Promise<boolean> {
    return this.commit.submit(id);
  }
}
