/**
 * Which models a deployment offers: the operator's model registry. The client's `model` string
 * (or its agent's) reaches the provider and names a quota bucket, so it must be one the operator
 * chose: any other string would get a quota bucket of its own (sidestepping the per-model limit)
 * and whatever the provider makes of it.
 *
 * Two ways to write it, parsed here into the same entries:
 * - `MODEL_REGISTRY` (JSON, or a file named by `MODEL_REGISTRY_FILE` on a host): each public
 *   name mapped to a provider (OpenAI-compatible base URL, the environment variable holding its
 *   key, the upstream model id), its global concurrency limit, optional per-tenant limits and
 *   an optional tenant allow-list. It names key *variables*, never keys, so the same text can be
 *   given to the gateway (which reads only names and allow-lists) and to every host.
 * - the older `MODELS` list of names, all served by the host's single MODEL_BASE_URL provider.
 */
import { z } from "zod";

/** Where a host sends a model's turns. Absent on entries from a bare `MODELS` list. */
export interface ModelProviderRef {
  baseUrl: string;
  /** The environment variable holding the API key (resolved by the host at startup). */
  apiKeyEnv: string;
  /** The provider's own model id (defaults to the public name). */
  upstreamModel: string;
  /** Header wait and inter-chunk silence allowed, ms. */
  timeoutMs: number | null;
}

export interface ModelEntry {
  /** What clients send as `model` and what the quota key is built from. */
  name: string;
  provider?: ModelProviderRef;
  /** Concurrent model turns on this model across all hosts; null: the host's QUOTA_MODEL_LIMIT. */
  concurrency?: number | null;
  /** Concurrent turns one tenant may hold on this model; null: no per-tenant limit on the model. */
  tenantConcurrency?: number | null;
  /** Per-tenant overrides of tenantConcurrency. */
  tenantLimits?: Readonly<Record<string, number>>;
  /** The tenants that may use the model; absent: every tenant. */
  tenants?: readonly string[];
  /** The operator's prices; absent: the model's calls have no cost (`cost_usd` null). */
  pricing?: ModelPricing;
}

/** What one million tokens cost, in US dollars, as the operator's registry says. */
export interface ModelPricing {
  inputUsdPerMtok: number;
  outputUsdPerMtok: number;
}

export interface ModelCatalog {
  /** In the operator's order; the first is the default. Empty: no choice offered. */
  entries: readonly ModelEntry[];
}

const MODEL_NAME_RE = /^[A-Za-z0-9._:/@-]{1,200}$/;

/**
 * `MODELS` as the operator writes it: names separated by commas, the first one the default.
 * Returns the problem as a string instead of throwing, so each process can name its variable.
 */
export function parseModelList(raw: string | undefined): ModelCatalog | string {
  if (raw === undefined || raw.trim() === "") return { entries: [] };
  const names = raw.split(",").map((s) => s.trim());
  const bad = names.find((n) => !MODEL_NAME_RE.test(n));
  if (bad !== undefined) {
    return bad === ""
      ? "an empty name (two commas in a row, or a trailing comma)"
      : `"${bad}" is not a model name (letters, digits and . _ : / @ -, at most 200)`;
  }
  const seen = new Set<string>();
  const entries: ModelEntry[] = [];
  for (const name of names) {
    if (seen.has(name)) return `"${name}" is listed twice`;
    seen.add(name);
    entries.push({ name });
  }
  return { entries };
}

const limit = z.number().int().min(1).max(1_000_000);

const RegistryEntrySchema = z
  .object({
    name: z.string().regex(MODEL_NAME_RE, "letters, digits and . _ : / @ -, at most 200"),
    base_url: z
      .string()
      .refine((v) => /^https?:\/\//.test(v) && URL.canParse(v), "must be an http(s) URL")
      .optional(),
    api_key_env: z
      .string()
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name")
      .optional(),
    upstream_model: z.string().min(1).max(200).optional(),
    timeout_ms: z.number().int().min(1).max(3_600_000).optional(),
    concurrency: limit.optional(),
    tenant_concurrency: limit.optional(),
    tenant_limits: z.record(z.string().min(1), limit).optional(),
    tenants: z.array(z.string().min(1)).optional(),
    // US dollars per million tokens; the host multiplies in Postgres numeric (run-repo.ts).
    pricing: z
      .object({
        input_usd_per_mtok: z.number().min(0).max(1_000_000),
        output_usd_per_mtok: z.number().min(0).max(1_000_000),
      })
      .strict()
      .optional(),
  })
  .strict()
  .refine((e) => (e.base_url === undefined) === (e.api_key_env === undefined), {
    message: "base_url and api_key_env go together",
  });

const RegistrySchema = z
  .object({
    /** The model jobs run on when they name none; the first entry when absent. */
    default: z.string().optional(),
    models: z.array(RegistryEntrySchema).min(1),
  })
  .strict();

/**
 * `MODEL_REGISTRY` as the operator writes it (JSON text). The default entry comes first in the
 * catalog. Returns the problem as a string instead of throwing, so each process can name its variable.
 */
export function parseModelRegistry(raw: string): ModelCatalog | string {
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch (err) {
    return `not JSON (${err instanceof Error ? err.message : String(err)})`;
  }
  const parsed = RegistrySchema.safeParse(json);
  if (!parsed.success) {
    return parsed.error.issues.map((i) => `${i.path.join(".") || "(top)"}: ${i.message}`).join("; ");
  }
  const seen = new Set<string>();
  const entries: ModelEntry[] = [];
  for (const e of parsed.data.models) {
    if (seen.has(e.name)) return `"${e.name}" is listed twice`;
    seen.add(e.name);
    entries.push({
      name: e.name,
      ...(e.base_url !== undefined && e.api_key_env !== undefined
        ? {
            provider: {
              baseUrl: e.base_url,
              apiKeyEnv: e.api_key_env,
              upstreamModel: e.upstream_model ?? e.name,
              timeoutMs: e.timeout_ms ?? null,
            },
          }
        : {}),
      concurrency: e.concurrency ?? null,
      tenantConcurrency: e.tenant_concurrency ?? null,
      ...(e.tenant_limits ? { tenantLimits: e.tenant_limits } : {}),
      ...(e.tenants ? { tenants: e.tenants } : {}),
      ...(e.pricing
        ? {
            pricing: {
              inputUsdPerMtok: e.pricing.input_usd_per_mtok,
              outputUsdPerMtok: e.pricing.output_usd_per_mtok,
            },
          }
        : {}),
    });
  }
  const def = parsed.data.default;
  if (def === undefined) return { entries };
  const first = entries.find((e) => e.name === def);
  if (!first) return `default "${def}" is not one of the models`;
  return { entries: [first, ...entries.filter((e) => e !== first)] };
}

/** Whether `tenantId` may use the model (GET /v1/models lists only these). */
export function modelAllowedFor(entry: ModelEntry, tenantId: string): boolean {
  return entry.tenants === undefined || entry.tenants.includes(tenantId);
}

/** The concurrent turns one tenant may hold on this model, or null for no per-tenant limit. */
export function tenantModelLimit(entry: ModelEntry, tenantId: string): number | null {
  return entry.tenantLimits?.[tenantId] ?? entry.tenantConcurrency ?? null;
}

/** The entry a job runs on: the one it names, or the default when it names none; null if not offered. */
export function resolveModel(catalog: ModelCatalog, requested: string | null | undefined): ModelEntry | null {
  if (requested === null || requested === undefined) return catalog.entries[0] ?? null;
  return catalog.entries.find((e) => e.name === requested) ?? null;
}
