/**
 * Serialization per key (create and delete of one sandbox never interleave) and a counting
 * semaphore (deletions run in parallel up to a bound). In-process only: one sandbox-host owns its
 * runs' sandboxes, so there is no second process to coordinate with.
 */
export interface KeyedLock {
  run<T>(key: string, fn: () => Promise<T>): Promise<T>;
}

export function createKeyedLock(): KeyedLock {
  const tails = new Map<string, Promise<unknown>>();
  return {
    run<T>(key: string, fn: () => Promise<T>): Promise<T> {
      const prev = tails.get(key) ?? Promise.resolve();
      const next = prev.then(fn, fn);
      const tail = next.then(
        () => undefined,
        () => undefined,
      );
      tails.set(key, tail);
      void tail.then(() => {
        if (tails.get(key) === tail) tails.delete(key);
      });
      return next;
    },
  };
}

/** No serialization at all. Exists only so a test can show what the real lock prevents. */
export const noKeyedLock: KeyedLock = { run: (_key, fn) => fn() };

export interface Semaphore {
  run<T>(fn: () => Promise<T>, opts?: SemaphoreWait): Promise<T>;
  /** Holders right now (at most the limit). */
  readonly active: number;
  /** Callers waiting for a turn, in arrival order. */
  readonly waiting: number;
}

export interface SemaphoreWait {
  /** Called once when the caller has to wait, with how many callers are ahead of it. */
  onQueued?: (ahead: number) => void;
  /** Leaving the queue before the turn came: the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** First come, first served; a waiter that aborts leaves the queue without taking a turn. */
export function createSemaphore(limit: number): Semaphore {
  if (!Number.isInteger(limit) || limit < 1)
    throw new Error(`semaphore limit must be a positive integer, got ${limit}`);
  let inUse = 0;
  const waiters: Array<() => void> = [];
  const release = () => {
    const next = waiters.shift();
    if (next) next();
    else inUse--;
  };
  const acquire = (opts: SemaphoreWait | undefined): Promise<void> => {
    opts?.signal?.throwIfAborted();
    if (inUse < limit) {
      inUse++;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const signal = opts?.signal;
      const onAbort = () => {
        const i = waiters.indexOf(turn);
        if (i >= 0) waiters.splice(i, 1);
        reject(signal?.reason);
      };
      // The turn passes the slot on as is (inUse unchanged): a release hands it to the next waiter.
      const turn = () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      waiters.push(turn);
      opts?.onQueued?.(waiters.length - 1);
    });
  };
  return {
    async run<T>(fn: () => Promise<T>, opts?: SemaphoreWait): Promise<T> {
      await acquire(opts);
      try {
        return await fn();
      } finally {
        release();
      }
    },
    get active() {
      return inUse;
    },
    get waiting() {
      return waiters.length;
    },
  };
}
