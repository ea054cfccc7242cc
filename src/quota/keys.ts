/**
 * The one place Redis key strings are built (after trigger.dev's keyProducer). Everything in Redis
 * is an accelerator or a lease: losing every key loses no job.
 */
export function redisKeys(prefix = "ear") {
  return {
    /** ZSET of queued, ownerless job ids scored by enqueue time (ms). Only wakes claimers. */
    readyIndex: () => `${prefix}:ready`,
    /** Cancel hint for a running job (issue 6). */
    cancelHint: (jobId: string) => `${prefix}:cancel:${jobId}`,
    /** Quota lease ZSET for a quota key (issue 5). */
    quotaLeases: (quotaKey: string) => `${prefix}:quota:${quotaKey}`,
  };
}
export type RedisKeys = ReturnType<typeof redisKeys>;
