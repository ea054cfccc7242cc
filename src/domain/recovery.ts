/**
 * The recovery thresholds' defaults, shared by the hosts' reapers (sandbox-host/host-config.ts) and the
 * Worker's cron backstop (workers/gateway-config.ts): the backstop must never call a run lost, or a claim
 * stale, sooner than the hosts would, so both sides read the same numbers from here.
 */

/**
 * How often a host heartbeats its runs (HOST_HEARTBEAT_MS); also the lease store's default
 * (src/quota/lease-store.ts), whose lease timeout is three of these.
 */
export const DEFAULT_HEARTBEAT_MS = 2000;

/** A claim not started within this is released (HOST_CLAIM_TIMEOUT_MS, REAPER_CLAIM_TIMEOUT_MS). */
export const DEFAULT_CLAIM_TIMEOUT_MS = 10_000;

/**
 * A run silent this long is `lost` (HOST_RUN_LOST_AFTER_MS, REAPER_RUN_LOST_AFTER_MS): three missed
 * heartbeats plus 2 s for a slow statement, so one late heartbeat never loses a live run.
 */
export function defaultRunLostAfterMs(heartbeatMs = DEFAULT_HEARTBEAT_MS): number {
  return 3 * heartbeatMs + 2000;
}
