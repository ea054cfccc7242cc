/**
 * Group commit: callers that arrive at the same moment share one statement instead of one round
 * trip each. A lone item goes out on the next microtask, so an idle host adds no latency; while
 * a statement is in flight, new items queue and go together in the next (at most `maxBatch`).
 * Each caller still gets its own answer, read from the statement's results by position. A
 * failed statement rejects every caller in it: the batch is one statement, so none was written.
 */
interface Waiting<I, O> {
  item: I;
  resolve(result: O): void;
  reject(err: unknown): void;
}

export class GroupCommit<I, O> {
  private queue: Array<Waiting<I, O>> = [];
  private draining = false;

  /** `write` answers one result per item, in the items' order. */
  constructor(
    private readonly write: (items: I[]) => Promise<O[]>,
    private readonly maxBatch = 64,
  ) {}

  submit(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
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
        const results = await this.write(batch.map((w) => w.item));
        for (const [i, w] of batch.entries()) w.resolve(results[i] as O);
      } catch (err) {
        for (const w of batch) w.reject(err);
      }
    }
    this.draining = false;
  }
}
