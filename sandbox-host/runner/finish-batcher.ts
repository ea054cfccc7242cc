/**
 * Group commit for the terminal write, the same way StartBatcher does it for the started CAS.
 * Runs that end at the same moment (a busy host: many short runs in flight) share one
 * `finishJobsMany` statement instead of one round trip each; a lone finish goes out on the next
 * microtask, so an idle host adds no latency. While a statement is in flight, new finishes queue
 * and go together in the next. Each run still gets its own answer — whether its own full
 * execution identity hit — so one stale run in a batch misses alone while the others land. A
 * failed statement (Postgres unreachable) rejects every run in it: none of them was written,
 * since the batch is one statement, and the reaper decides as for a single failed write.
 */
import type { Db } from "../../src/db/client";
import { type Finish, type FinishResult, finishJobsMany } from "../../src/db/ownership-repo";

interface Waiting {
  finish: Finish;
  resolve(result: FinishResult): void;
  reject(err: unknown): void;
}

export class FinishBatcher {
  private queue: Waiting[] = [];
  private draining = false;

  constructor(
    private readonly db: Db,
    private readonly hostId: string,
    private readonly maxBatch = 64,
  ) {}

  finish(finish: Finish): Promise<FinishResult> {
    return new Promise<FinishResult>((resolve, reject) => {
      this.queue.push({ finish, resolve, reject });
      if (!this.draining) {
        this.draining = true;
        queueMicrotask(() => void this.drain());
      }
    });
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      try {
        const results = await finishJobsMany(
          this.db,
          this.hostId,
          batch.map((w) => w.finish),
        );
        for (const [i, w] of batch.entries()) w.resolve(results[i] as FinishResult);
      } catch (err) {
        for (const w of batch) w.reject(err);
      }
    }
    this.draining = false;
  }
}
