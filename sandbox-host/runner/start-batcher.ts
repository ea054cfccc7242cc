/**
 * Group commit for the started CAS. Runs that reach their start at the same moment (a claim
 * pass that won several jobs, or a busy host) share one `markStartedMany` statement instead of
 * one round trip each; a lone start goes out on the next microtask, so an idle host pays no
 * added latency. While a statement is in flight, new starts queue and go together in the next.
 * Each start still gets its own answer: whether its own full claim identity hit.
 */
import type { Db } from "../../src/db/client";
import { markStartedMany } from "../../src/db/ownership-repo";
import type { ExecutionIdentity } from "../../src/domain/identity";

interface Waiting {
  id: ExecutionIdentity;
  resolve(started: boolean): void;
  reject(err: unknown): void;
}

export class StartBatcher {
  private queue: Waiting[] = [];
  private draining = false;

  constructor(
    private readonly db: Db,
    private readonly hostId: string,
    private readonly maxBatch = 64,
  ) {}

  start(id: ExecutionIdentity): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.queue.push({ id, resolve, reject });
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
        const started = await markStartedMany(
          this.db,
          this.hostId,
          batch.map((w) => w.id),
        );
        for (const w of batch) w.resolve(started.has(w.id.executionId));
      } catch (err) {
        for (const w of batch) w.reject(err);
      }
    }
    this.draining = false;
  }
}
