/**
 * Admission: when a queued job may be claimed and in what order (docs/claims.md, "Admission").
 * The one home of the submit fields' ranges and of the tenant settings' defaults; the claim
 * statement that applies them is in src/db/ownership-repo.ts (claimFromPostgres).
 */
export const ADMISSION_LIMITS = {
  /** `priority`: higher first, inside its tenant's share. */
  minPriority: -100,
  maxPriority: 100,
  /** `delay_s`: a year. */
  maxDelayS: 31_536_000,
  /** `ttl_s`: 30 days. */
  minTtlS: 1,
  maxTtlS: 2_592_000,
  maxConcurrencyKey: 128,
  /** `tenant set --weight`: a tenant's share of the fleet relative to the others (default 1). */
  minWeight: 1,
  maxWeight: 1000,
  /** `tenant set --max-running`: 0 = no cap. */
  maxMaxRunning: 100_000,
} as const;
