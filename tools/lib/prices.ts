/**
 * The list prices this project's cost figures use (docs/capacity.md "What a run costs",
 * docs/deploy.md "What an idle fleet costs"), in one place. None is read from a vendor's live
 * page here (no internet from this machine): each says where and when it was taken, and a reader
 * should check them before relying on a total.
 */
export const PRICES = {
  /** Workers Paid (Standard): $0.30 per million requests past the 10 million included a month. */
  workersPerMillionRequests: 0.3,
  /** Workers Paid: $0.02 per million CPU milliseconds past the 30 million included a month. */
  workersPerMillionCpuMs: 0.02,
  /** Durable Objects (Workers Paid): $0.15 per million requests (each RPC call or fetch to a stub is one). */
  durableObjectsPerMillionRequests: 0.15,
  /** Neon Launch: $0.106 per compute-unit hour (1 CU = 1 vCPU, 4 GB), plans page as updated 2026-11-12. */
  neonPerCuHour: 0.106,
  /** Upstash Redis pay-as-you-go: $0.20 per 100,000 commands (pricing page as captured 2026-11-09). */
  upstashPer100kCommands: 0.2,
  /** R2 Standard: $4.50 per million class A operations (PUT, LIST…), past the 1 million included a month. */
  r2ClassAPerMillion: 4.5,
  /** R2 Standard: $0.36 per million class B operations (GET, HEAD), past the 10 million included a month. */
  r2ClassBPerMillion: 0.36,
  /** Where the R2 figures come from, printed beside the R2 table. */
  r2Source: "Cloudflare R2 pricing page (Standard storage class, 2026); list prices, past the included usage",
  /** Where the figures above come from, printed beside every priced table. */
  source:
    "Cloudflare Workers and Durable Objects pricing pages (2026), Neon plans page (2026-11-12), Upstash Redis pricing page (2026-11-09); list prices, past each plan's included usage",
} as const;
