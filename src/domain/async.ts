/**
 * The promise helpers every part shares: a bounded wait and a plain sleep. One home so a
 * timeout reads the same (and rejects with the same error class) in the gateway and the host.
 */

/** A wait that ran out; `what` names what did not answer, for the log and the 503 message. */
export class TimeoutError extends Error {
  override readonly name = "TimeoutError";
  constructor(
    readonly ms: number,
    what = "the call",
  ) {
    super(`${what} did not answer within ${ms} ms`);
  }
}

/**
 * `work`'s result, or a TimeoutError after `ms`. The work itself is not cancelled (a promise
 * cannot be): callers that must not pile up requests keep a handle on it (the claimer does).
 */
export async function withTimeout<T>(work: Promise<T>, ms: number, what?: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(ms, what)), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }
}

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Whether `work` settles within `ms` (a rejection is thrown, as from `work`). */
export async function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  try {
    await withTimeout(work, ms);
    return true;
  } catch (err) {
    if (err instanceof TimeoutError) return false;
    throw err;
  }
}
