/**
 * What `npm run dev` allows that a deployment does not, unless the developer set the variable
 * (their value is used as given): a webhook receiver, an MCP server and a page (Vite, Next…) on
 * this machine, on whatever port they got. Without them a first webhook or browser call was
 * refused until the stack was restarted with the right list. Set by tools/stack/dev.ts only, and
 * printed there as dev-only: nothing in the gateway's or the hosts' own defaults changes (with
 * these unset, webhooks and MCP are off and no origin may call the API).
 *
 * The per-tenant limits (the gateway's, and the hosts' share of model slots) are sized for
 * `npm run load` up to 1,000 runs at once from the dev key (one tenant): each run is a submit, a
 * stream and a read-back, and one model call at a time. With the deployment's defaults
 * (1,200 requests per 10 s, 200 open streams, 1,000 queued jobs per tenant) the step of 1,000 was
 * refused by the limits, not measured. A developer who tests their own handling of a 429 sets
 * the variable to the deployment's value.
 */
export const DEV_ONLY_DEFAULTS = {
  WEBHOOK_ALLOWED_URLS: "http://127.0.0.1:*,http://localhost:*",
  MCP_ALLOWED_URLS: "http://127.0.0.1:*,http://localhost:*",
  CORS_ALLOWED_ORIGINS: "http://localhost:*,http://127.0.0.1:*",
  RATE_LIMIT_REQUESTS: "100000",
  MAX_STREAMS_PER_TENANT: "20000",
  MAX_QUEUED_JOBS_PER_TENANT: "50000",
  // The hosts' per-tenant share of a model's slots (default 32, the fairness rule between
  // tenants) made the dev key's 1,000 runs at once wait for 32 slots: 50 of them failed
  // quota_unavailable after QUOTA_MAX_WAIT_MS. `npm run dev` has one tenant; 0 is no share.
  QUOTA_TENANT_LIMIT: "0",
} as const;

/** The dev-only defaults `env` does not set itself. */
export function devOnlyDefaults(
  env: Record<string, string | undefined>,
): Partial<Record<keyof typeof DEV_ONLY_DEFAULTS, string>> {
  return Object.fromEntries(Object.entries(DEV_ONLY_DEFAULTS).filter(([name]) => (env[name] ?? "").trim() === ""));
}
