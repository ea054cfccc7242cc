/**
 * The one place Redis key strings are built (after trigger.dev's keyProducer). Everything in Redis
 * is an accelerator or a lease: losing every key loses no job.
 */
export function redisKeys(prefix = "ear") {
  return {
    /** ZSET of queued, ownerless job ids scored by enqueue time (ms). Only wakes claimers. */
    readyIndex: () => `${prefix}:ready`,
    /** Set by every index rebuild; its absence means Redis lost its data and the index needs one now. */
    indexMarker: () => `${prefix}:ready:built`,
    /**
     * Cancel hint for a running job: only an accelerator (the durable flag is in Postgres); the
     * owner's batched MGET sees it within ~200 ms.
     */
    cancelHint: (jobId: string) => `${prefix}:cancel:${jobId}`,
    /** Quota lease ZSET for a quota key: member = holder, score = last renewal on the Redis server clock. */
    quotaLeases: (quotaKey: string) => `${prefix}:quota:${quotaKey}`,
    /** Waiter queue of a quota key: holder → arrival ticket (server ms), for fair admission. */
    quotaWaiters: (quotaKey: string) => `${prefix}:quota-waiters:${quotaKey}`,
    /** Last poll (server ms) of each waiter of a quota key: waiters that stop polling are purged. */
    quotaWaitersSeen: (quotaKey: string) => `${prefix}:quota-seen:${quotaKey}`,
    /**
     * A budget's reservations (src/quota/lua/acquire.lua): ZSET holder → last heartbeat, renewed
     * with the holder's lease, so a dead holder's reservation expires like its lease.
     */
    budgetReservations: (budgetKey: string) => `${prefix}:budget-res:${budgetKey}`,
    /** HASH holder → its reservation in nano-USD (integer). */
    budgetAmounts: (budgetKey: string) => `${prefix}:budget-amt:${budgetKey}`,
    /** A budget's settled spend in nano-USD (integer), moved only by settle.lua. */
    budgetSpent: (budgetKey: string) => `${prefix}:budget-spent:${budgetKey}`,
    /** Set once a holder's call is settled: a second settle of the same call adds nothing. */
    budgetSettled: (holder: string) => `${prefix}:budget-settled:${holder}`,
    /**
     * ZSET of sleeping hosts (src/quota/fleet-wake.ts): member = host id, score = when its sleep
     * ends at the latest (ms). A submit's wake-up pokes every live member and empties it.
     */
    sleepers: () => `${prefix}:sleepers`,
    /**
     * ZSET of the sleepers whose look found runs held (sandbox-host/lifecycle/held-watch.ts), same
     * members and scores as in `sleepers`: while one is live the gateway's cron still runs its
     * backstops. Always `sleepers` + ":held" (INDEX_AND_WAKE names it from that).
     */
    heldSleepers: () => `${prefix}:sleepers:held`,
    /** The LIST a sleeping host blocks on (BLPOP); a poke pushes one entry. */
    wake: (hostId: string) => `${prefix}:wake:${hostId}`,
    /** Prefix of @upstash/ratelimit's keys for the per-API-key request rate (it appends the rest). */
    rateLimitPrefix: () => `${prefix}:rl`,
  };
}
export type RedisKeys = ReturnType<typeof redisKeys>;

/**
 * Quota keys (what `quotaLeases` and the waiter queues are keyed by): one per model (the
 * registry's public name), one per tenant when tenant limits are on, and one per tenant and model
 * when the registry limits a tenant on that model. Built here so a tool reading a lease ZSET names the same key
 * the runner acquires on.
 */
export const quotaKeys = {
  model: (model: string) => `model:${model}`,
  tenant: (tenantId: string) => `tenant:${tenantId}`,
  /** One tenant's turns on one model, when the registry gives the model a per-tenant limit. */
  tenantModel: (tenantId: string, model: string) => `tenant-model:${tenantId}:${model}`,
};

/** Budget keys (what the budget reservations and spent counters are keyed by). */
export const budgetKeys = {
  /** A tenant's spend of one UTC day (`YYYY-MM-DD`). */
  tenantDay: (tenantId: string, day: string) => `tenant-day:${tenantId}:${day}`,
  /** A job tree's spend (the root job and every child it delegated), against the root agent's `limits.max_cost_usd`. */
  tree: (rootJobId: string) => `tree:${rootJobId}`,
  /** A job tree's tokens (prompt + completion, every call), against its `limits.max_tokens`: counted in tokens, not nano-USD. */
  treeTokens: (rootJobId: string) => `tree-tokens:${rootJobId}`,
};

/** Whether a budget key counts tokens (else nano-USD). */
export const isTokenBudget = (key: string): boolean => key.startsWith("tree-tokens:");
