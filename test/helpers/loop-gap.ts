/**
 * How long the test's own event loop went without running a 20 ms timer while `work` ran: the
 * measure of "this did not block the loop" (a synchronous regex or schema check shows up as one
 * gap as long as itself). Returns the work's result, its duration and the worst gap, all in ms.
 */
export async function measureLoopGap<T>(
  work: () => Promise<T>,
): Promise<{ result: T; tookMs: number; worstGapMs: number }> {
  let worstGapMs = 0;
  let last = performance.now();
  const ticker = setInterval(() => {
    const now = performance.now();
    worstGapMs = Math.max(worstGapMs, now - last);
    last = now;
  }, 20);
  const t0 = performance.now();
  try {
    const result = await work();
    return { result, tookMs: performance.now() - t0, worstGapMs };
  } finally {
    clearInterval(ticker);
  }
}
