/**
 * The gateway's configuration, parsed from the Worker env with zod once per set of values and then
 * passed around as a plain value; nothing else reads `env` vars. A missing or malformed setting
 * fails every route that needs it with a logged reason instead of a confusing driver error.
 */
import { z } from "zod";
import { LIMITS } from "../src/contracts/job";
import { LIMIT_DEFAULTS } from "../src/contracts/limits";
import { BLOB_GRACE_DEFAULT_S } from "../src/db/artifacts-repo";
import { JOB_RETENTION_DEFAULT_S } from "../src/db/retention-repo";
import {
  type AllowedUrl,
  parseAllowedUrls,
  parseSecretNames,
  type SecretTenants,
  splitAnyPort,
} from "../src/domain/mcp";
import { type ModelCatalog, parseModelList, parseModelRegistry } from "../src/domain/models";
import { DEFAULT_CLAIM_TIMEOUT_MS, defaultRunLostAfterMs } from "../src/domain/recovery";
import type { Env } from "./env";

/**
 * `https://console.example.com`, `http://localhost:5173`: what a browser sends as `Origin`; or a
 * loopback host with any port, `http://localhost:*` (splitAnyPort: a dev server's port changes).
 */
function isOrigin(value: string): boolean {
  const wild = splitAnyPort(value);
  if (typeof wild === "string") return false;
  try {
    if (wild) return new URL(wild.url).origin === wild.url;
    const url = new URL(value);
    return (url.protocol === "https:" || url.protocol === "http:") && url.origin === value;
  } catch {
    return false;
  }
}

/** `--var NAME:` passes an empty string; treat it as unset. */
const optional = <T extends z.ZodType>(schema: T) => z.preprocess((v) => (v === "" ? undefined : v), schema.optional());

const ConfigSchema = z.object({
  DATABASE_URL: z.string().min(1, "DATABASE_URL is required"),
  NEON_FETCH_ENDPOINT: optional(z.url()),
  UPSTASH_REDIS_REST_URL: z.url(),
  UPSTASH_REDIS_REST_TOKEN: z.string().min(1),
  INTERNAL_SIGNING_SECRET: z.string().min(16, "INTERNAL_SIGNING_SECRET must be at least 16 characters"),
  /** The secret being rotated out: still accepted on ingest until every host signs with the new one. */
  INTERNAL_SIGNING_SECRET_PREVIOUS: optional(
    z.string().min(16, "INTERNAL_SIGNING_SECRET_PREVIOUS must be at least 16 characters"),
  ),
  /** Signs access tokens (POST /v1/tokens); unset: a key derived from INTERNAL_SIGNING_SECRET. */
  TOKEN_SIGNING_SECRET: optional(z.string().min(32, "TOKEN_SIGNING_SECRET must be at least 32 characters")),
  /** The token secret being rotated out: tokens it signed are still accepted until they expire. */
  TOKEN_SIGNING_SECRET_PREVIOUS: optional(
    z.string().min(32, "TOKEN_SIGNING_SECRET_PREVIOUS must be at least 32 characters"),
  ),
  /** Origins whose pages may call the API (CORS), comma-separated; unset or empty: none. */
  CORS_ALLOWED_ORIGINS: optional(
    z
      .string()
      .transform((raw) =>
        raw
          .split(",")
          .map((o) => o.trim())
          .filter((o) => o !== ""),
      )
      .pipe(
        z.array(
          z
            .string()
            .refine(
              isOrigin,
              "each entry must be an origin: scheme://host[:port], no path; the one wildcard is a loopback host's port (http://localhost:*)",
            ),
        ),
      ),
  ),
  MAX_BODY_BYTES: optional(z.coerce.number().int().positive()),
  RATE_LIMIT_REQUESTS: optional(z.coerce.number().int().min(0)),
  RATE_LIMIT_WINDOW_S: optional(z.coerce.number().int().min(1).max(86_400)),
  MAX_STREAMS_PER_TENANT: optional(z.coerce.number().int().min(0)),
  MAX_QUEUED_JOBS_PER_TENANT: optional(z.coerce.number().int().min(0)),
  MAX_AGENTS_PER_TENANT: optional(z.coerce.number().int().min(0)),
  MAX_VERSIONS_PER_AGENT: optional(z.coerce.number().int().min(0)),
  MAX_AGENT_BYTES_PER_TENANT: optional(z.coerce.number().int().min(0)),
  /** "true": a client's traceparent parents its runs (sampling included); default: only linked. */
  OTEL_TRUST_CLIENT_SAMPLING: optional(z.enum(["true", "false"])),
  MODELS: optional(z.string()),
  MODEL_REGISTRY: optional(z.string()),
  /** The URL prefixes hosts may call MCP servers at (the hosts' own list); unset or empty: MCP off. */
  MCP_ALLOWED_URLS: optional(
    z.string().transform((raw, ctx) => {
      const parsed = parseAllowedUrls(raw);
      if (typeof parsed !== "string") return parsed;
      ctx.addIssue({ code: "custom", message: parsed });
      return z.NEVER;
    }),
  ),
  /**
   * The names of the hosts' MCP secrets (never the values), comma-separated, each `name` (every
   * tenant) or `name:acme|beta` (those tenants); unset: not checked here.
   */
  MCP_SECRET_NAMES: optional(
    z.string().transform((raw, ctx) => {
      const parsed = parseSecretNames(raw);
      if (typeof parsed !== "string") return parsed;
      ctx.addIssue({ code: "custom", message: parsed });
      return z.NEVER;
    }),
  ),
  /** The URL prefixes webhook endpoints may be at (the hosts' own list); unset or empty: webhooks off. */
  WEBHOOK_ALLOWED_URLS: optional(
    z.string().transform((raw, ctx) => {
      const parsed = parseAllowedUrls(raw);
      if (typeof parsed !== "string") return parsed;
      ctx.addIssue({ code: "custom", message: parsed });
      return z.NEVER;
    }),
  ),
  REAPER_RUN_LOST_AFTER_MS: optional(z.coerce.number().int().min(1000).max(3_600_000)),
  REAPER_CLAIM_TIMEOUT_MS: optional(z.coerce.number().int().min(1000).max(3_600_000)),
  JOB_EVENTS_RETENTION_S: optional(z.coerce.number().int().min(60)),
  JOB_RETENTION_S: optional(
    z.coerce
      .number()
      .int()
      .min(60)
      .max(10 * 365 * 86_400),
  ),
  BLOB_GRACE_S: optional(
    z.coerce
      .number()
      .int()
      .min(0)
      .max(30 * 86_400),
  ),
});

/**
 * The cron backstop's thresholds (workers/scheduled.ts). They mean what the hosts' HOST_RUN_LOST_AFTER_MS
 * and HOST_CLAIM_TIMEOUT_MS mean, and default to the hosts' defaults (src/domain/recovery.ts). A
 * deployment that raises the hosts' values must raise these to at least the same: the backstop
 * would otherwise call a run lost that its host still considers alive.
 */
export const BACKSTOP_DEFAULTS = {
  runLostAfterMs: defaultRunLostAfterMs(),
  claimTimeoutMs: DEFAULT_CLAIM_TIMEOUT_MS,
} as const;

/** A finished job's event log is kept this long after its terminal event (JOB_EVENTS_RETENTION_S). */
export const EVENT_RETENTION_DEFAULT_S = 7 * 24 * 3600;

/**
 * The event log's retention in ms, for the JobEvents object, which must not depend on the rest
 * of the configuration parsing (an object that cannot read DATABASE_URL still has to expire).
 * A malformed value falls back to the default; loadConfig reports it to the gateway's routes.
 */
export function eventRetentionMs(env: Env): number {
  const parsed = ConfigSchema.shape.JOB_EVENTS_RETENTION_S.safeParse(env.JOB_EVENTS_RETENTION_S);
  return ((parsed.success ? parsed.data : undefined) ?? EVENT_RETENTION_DEFAULT_S) * 1000;
}

export { LIMIT_DEFAULTS };

export interface GatewayLimits {
  rateLimitRequests: number;
  rateLimitWindowS: number;
  maxStreamsPerTenant: number;
  maxQueuedJobsPerTenant: number;
  /** The caps on a tenant's agents (src/db/agents-repo.ts `AgentCaps`); 0 turns one off. */
  maxAgentsPerTenant: number;
  maxVersionsPerAgent: number;
  maxAgentBytesPerTenant: number;
}

export interface GatewayConfig {
  databaseUrl: string;
  neonFetchEndpoint: string | undefined;
  redis: { url: string; token: string };
  signingSecret: string;
  /** Every secret an internal request may be signed with: the current one first, then the previous. */
  signingSecrets: readonly string[];
  /**
   * Access tokens' HMAC secrets, the signing one first, then the one being rotated out; null:
   * TOKEN_SIGNING_SECRET is unset and keys are derived from `signingSecrets` (access-tokens.ts).
   */
  tokenSecrets: readonly string[] | null;
  /** Origins allowed to call the API from a browser (CORS_ALLOWED_ORIGINS; corsOriginAllowed); empty: none. */
  corsAllowedOrigins: readonly string[];
  maxBodyBytes: number;
  limits: GatewayLimits;
  /**
   * OTEL_TRUST_CLIENT_SAMPLING: a client's traceparent becomes its run's parent, so the client's
   * sampled flag and trace id decide; false (the default): it is kept as a span link only
   * (clientTraceContext, src/domain/traceparent.ts).
   */
  trustClientSampling: boolean;
  /**
   * The models a client or an agent may name (MODEL_REGISTRY, else MODELS), each with its tenant
   * allow-list; none when both are unset, so `model` is refused.
   */
  models: ModelCatalog;
  /**
   * What agent definitions' mcp_servers may use: the operator's URL prefixes (MCP_ALLOWED_URLS,
   * empty = MCP off) and secret names with the tenants that may use each (MCP_SECRET_NAMES; null =
   * unknown here, the hosts check).
   */
  mcp: { allowedUrls: readonly AllowedUrl[]; secretNames: ReadonlyMap<string, SecretTenants> | null };
  /** Where webhook endpoints may be (WEBHOOK_ALLOWED_URLS); empty: every endpoint is refused. */
  webhookAllowedUrls: readonly AllowedUrl[];
  /** Thresholds of the scheduled reaper backstop (REAPER_RUN_LOST_AFTER_MS, REAPER_CLAIM_TIMEOUT_MS). */
  backstop: { runLostAfterMs: number; claimTimeoutMs: number };
  /** How long a finished job's event log is kept (JOB_EVENTS_RETENTION_S). */
  eventRetentionMs: number;
  /** Finished jobs are purged from Postgres this long after finishing (JOB_RETENTION_S; the cron's purge). */
  jobRetentionS: number;
  /**
   * A blob no artifact references is collected once untouched this long (BLOB_GRACE_S; the
   * cron's blob collection): a host between reserving a blob and recording its artifact is within it.
   */
  blobGraceS: number;
}

export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

/** The raw settings a parse depends on, as one string; `env` itself is not a stable key. */
function settingsKey(env: Env): string {
  const e = env as unknown as Record<string, unknown>;
  return CONFIG_KEYS.map((k) => String(e[k] ?? "")).join("\u0000");
}

const CONFIG_KEYS = Object.keys(ConfigSchema.shape);

/**
 * workerd hands the fetch handler a fresh `env` object per request, so a cache keyed by the
 * object never hit and every request ran the zod parse again (a quarter of the gateway's CPU
 * under load, measured). The parse is keyed by the settings' values instead; one deployment has
 * one configuration, so one entry is kept.
 */
let cached: { key: string; value: GatewayConfig | ConfigError } | null = null;

/**
 * MODEL_REGISTRY when set (the same JSON the hosts read: the gateway uses its names, default and
 * tenant allow-lists, never its provider fields), else the older MODELS list. The registry wins
 * when both are set, so a deployment can add it before removing MODELS.
 */
function modelCatalog(data: { MODELS?: string; MODEL_REGISTRY?: string }): ModelCatalog | string {
  if (data.MODEL_REGISTRY !== undefined) {
    const registry = parseModelRegistry(data.MODEL_REGISTRY);
    return typeof registry === "string" ? `MODEL_REGISTRY: ${registry}` : registry;
  }
  const list = parseModelList(data.MODELS);
  return typeof list === "string" ? `MODELS: ${list}` : list;
}

export function loadConfig(env: Env): GatewayConfig {
  const key = settingsKey(env);
  if (cached?.key !== key) {
    const parsed = ConfigSchema.safeParse(env);
    const models = parsed.success ? modelCatalog(parsed.data) : { entries: [] };
    const value = !parsed.success
      ? new ConfigError(
          `invalid worker configuration: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
        )
      : typeof models === "string"
        ? new ConfigError(`invalid worker configuration: ${models}`)
        : {
            databaseUrl: parsed.data.DATABASE_URL,
            neonFetchEndpoint: parsed.data.NEON_FETCH_ENDPOINT,
            redis: { url: parsed.data.UPSTASH_REDIS_REST_URL, token: parsed.data.UPSTASH_REDIS_REST_TOKEN },
            signingSecret: parsed.data.INTERNAL_SIGNING_SECRET,
            signingSecrets: [parsed.data.INTERNAL_SIGNING_SECRET, parsed.data.INTERNAL_SIGNING_SECRET_PREVIOUS].filter(
              (s): s is string => s !== undefined,
            ),
            tokenSecrets:
              parsed.data.TOKEN_SIGNING_SECRET === undefined
                ? null
                : [parsed.data.TOKEN_SIGNING_SECRET, parsed.data.TOKEN_SIGNING_SECRET_PREVIOUS].filter(
                    (s): s is string => s !== undefined,
                  ),
            corsAllowedOrigins: parsed.data.CORS_ALLOWED_ORIGINS ?? [],
            maxBodyBytes: parsed.data.MAX_BODY_BYTES ?? LIMITS.maxBodyBytes,
            limits: {
              rateLimitRequests: parsed.data.RATE_LIMIT_REQUESTS ?? LIMIT_DEFAULTS.rateLimitRequests,
              rateLimitWindowS: parsed.data.RATE_LIMIT_WINDOW_S ?? LIMIT_DEFAULTS.rateLimitWindowS,
              maxStreamsPerTenant: parsed.data.MAX_STREAMS_PER_TENANT ?? LIMIT_DEFAULTS.maxStreamsPerTenant,
              maxQueuedJobsPerTenant: parsed.data.MAX_QUEUED_JOBS_PER_TENANT ?? LIMIT_DEFAULTS.maxQueuedJobsPerTenant,
              maxAgentsPerTenant: parsed.data.MAX_AGENTS_PER_TENANT ?? LIMIT_DEFAULTS.maxAgentsPerTenant,
              maxVersionsPerAgent: parsed.data.MAX_VERSIONS_PER_AGENT ?? LIMIT_DEFAULTS.maxVersionsPerAgent,
              maxAgentBytesPerTenant: parsed.data.MAX_AGENT_BYTES_PER_TENANT ?? LIMIT_DEFAULTS.maxAgentBytesPerTenant,
            },
            trustClientSampling: parsed.data.OTEL_TRUST_CLIENT_SAMPLING === "true",
            models,
            mcp: {
              allowedUrls: parsed.data.MCP_ALLOWED_URLS ?? [],
              secretNames: parsed.data.MCP_SECRET_NAMES ?? null,
            },
            webhookAllowedUrls: parsed.data.WEBHOOK_ALLOWED_URLS ?? [],
            backstop: {
              runLostAfterMs: parsed.data.REAPER_RUN_LOST_AFTER_MS ?? BACKSTOP_DEFAULTS.runLostAfterMs,
              claimTimeoutMs: parsed.data.REAPER_CLAIM_TIMEOUT_MS ?? BACKSTOP_DEFAULTS.claimTimeoutMs,
            },
            eventRetentionMs: (parsed.data.JOB_EVENTS_RETENTION_S ?? EVENT_RETENTION_DEFAULT_S) * 1000,
            jobRetentionS: parsed.data.JOB_RETENTION_S ?? JOB_RETENTION_DEFAULT_S,
            blobGraceS: parsed.data.BLOB_GRACE_S ?? BLOB_GRACE_DEFAULT_S,
          };
    cached = { key, value };
  }
  if (cached.value instanceof ConfigError) throw cached.value;
  return cached.value;
}
