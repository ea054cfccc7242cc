/** Typed quota errors: one code per way a quota call can fail, so callers switch, not parse. */

/** Redis could not be asked (network, server down, or the breaker is open). Fail closed. */
export class QuotaUnavailableError extends Error {
  readonly code = "redis_unavailable" as const;
  /** True when the call was refused locally by the open breaker without touching Redis. */
  readonly breakerOpen: boolean;
  constructor(message: string, options: { cause?: unknown; breakerOpen?: boolean } = {}) {
    super(message, { cause: options.cause });
    this.name = "QuotaUnavailableError";
    this.breakerOpen = options.breakerOpen ?? false;
  }
}

/** A script answered with a shape it never returns: a bug or a wrong script text, not an outage. */
export class QuotaProtocolError extends Error {
  readonly code = "quota_protocol" as const;
  constructor(message: string) {
    super(message);
    this.name = "QuotaProtocolError";
  }
}
