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
  run<T>(fn: () => Promise<T>): Promise<T>;
}

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
  return {
    async run<T>(fn: () => Promise<T>): Promise<T> {
      if (inUse < limit) inUse++;
      else await new Promise<void>((resolve) => waiters.push(resolve));
      try {
        return await fn();
      } finally {
        release();
      }
    },
  };
}
