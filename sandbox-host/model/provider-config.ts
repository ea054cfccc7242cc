/**
 * Model provider configuration, parsed once at the process edge (sandbox-host/main.ts passes
 * its env in; nothing here reads process.env).
 */
import { z } from "zod";
import { type ModelCatalog, parseModelList, parseModelRegistry } from "../../src/domain/models";

export interface ModelConfig {
  baseUrl: string;
  apiKey: string;
  model: string;
  /** Longest wait for response headers, and for the next chunk of a stream. */
  timeoutMs?: number;
  /** Retries inside the client; 0 by default — the runtime decides retries under its quota. */
  maxRetries?: number;
}

const EnvSchema = z.object({
  MODEL_BASE_URL: z
    .string({ error: "MODEL_BASE_URL is required (the provider's base URL, e.g. http://127.0.0.1:8081/v1)" })
    .refine((v) => /^https?:\/\//.test(v) && URL.canParse(v), {
      error: "MODEL_BASE_URL must be an http(s) URL, e.g. https://api.openai.com/v1",
    }),
  MODEL_API_KEY: z
    .string({ error: "MODEL_API_KEY is required (any non-empty string for the local mock model)" })
    .min(1, { error: "MODEL_API_KEY must not be empty (any non-empty string for the local mock model)" }),
  MODEL_NAME: z
    .string({ error: "MODEL_NAME is required (the default model, e.g. gpt-4o-mini)" })
    .min(1, { error: "MODEL_NAME must not be empty" }),
  MODEL_TIMEOUT_MS: z
    .string()
    .regex(/^[1-9][0-9]*$/, { error: "MODEL_TIMEOUT_MS must be a positive integer number of milliseconds" })
    .transform(Number)
    .optional(),
});

/**
 * Every variable the model configuration reads (the deploy manifests' test checks against it).
 * The registry's `api_key_env` names are the operator's own choice and are not listed here.
 */
export const MODEL_ENV_NAMES: readonly string[] = [
  ...Object.keys(EnvSchema.shape),
  "MODELS",
  "MODEL_REGISTRY",
  "MODEL_REGISTRY_FILE",
];

export class ModelConfigError extends Error {
  override name = "ModelConfigError";
}

/** Throws ModelConfigError naming every bad or missing variable at once. */
export function modelConfigFromEnv(env: Record<string, string | undefined>): ModelConfig {
  const blankAsMissing = (v: string | undefined) => (v === undefined || v.trim() === "" ? undefined : v.trim());
  const parsed = EnvSchema.safeParse({
    MODEL_BASE_URL: blankAsMissing(env.MODEL_BASE_URL),
    MODEL_API_KEY: blankAsMissing(env.MODEL_API_KEY),
    MODEL_NAME: blankAsMissing(env.MODEL_NAME),
    MODEL_TIMEOUT_MS: blankAsMissing(env.MODEL_TIMEOUT_MS),
  });
  if (!parsed.success) {
    throw new ModelConfigError(`invalid model configuration: ${parsed.error.issues.map((i) => i.message).join("; ")}`);
  }
  const e = parsed.data;
  return {
    baseUrl: e.MODEL_BASE_URL,
    apiKey: e.MODEL_API_KEY,
    model: e.MODEL_NAME,
    ...(e.MODEL_TIMEOUT_MS !== undefined ? { timeoutMs: e.MODEL_TIMEOUT_MS } : {}),
  };
}

/**
 * The models jobs may run on: MODEL_NAME (the default, for jobs that name none) first, then the
 * rest of MODELS. Without MODELS only MODEL_NAME is offered, so a host is closed to arbitrary
 * model strings unless the operator opens it. MODELS must contain MODEL_NAME: a default the
 * gateway would refuse to accept by name is a configuration mistake.
 */
export function modelCatalogFromEnv(env: Record<string, string | undefined>): ModelCatalog {
  const defaultName = env.MODEL_NAME?.trim();
  if (!defaultName) throw new ModelConfigError("invalid model configuration: MODEL_NAME must not be empty");
  const listed = parseModelList(env.MODELS);
  if (typeof listed === "string") throw new ModelConfigError(`invalid model configuration: MODELS: ${listed}`);
  if (listed.entries.length === 0) return { entries: [{ name: defaultName }] };
  if (!listed.entries.some((e) => e.name === defaultName)) {
    throw new ModelConfigError(
      `invalid model configuration: MODELS (${listed.entries.map((e) => e.name).join(", ")}) must include MODEL_NAME (${defaultName})`,
    );
  }
  return { entries: [{ name: defaultName }, ...listed.entries.filter((e) => e.name !== defaultName)] };
}

/** One provider a host talks to, and the models (public names) it serves with which upstream id. */
export interface HostProvider {
  config: Omit<ModelConfig, "model">;
  /** Public name → the provider's own model id. */
  upstream: Map<string, string>;
}

/** What a host runs models with: the catalog (the default first) and the providers serving it. */
export interface HostModels {
  catalog: ModelCatalog;
  providers: HostProvider[];
}

/**
 * The host's models from its environment: the registry (`MODEL_REGISTRY`, or the text of the
 * file `MODEL_REGISTRY_FILE` names, which main.ts reads at startup and passes as `registryText`)
 * when given, else the older MODEL_BASE_URL / MODEL_API_KEY / MODEL_NAME / MODELS. A registry
 * entry without `base_url` is served by MODEL_BASE_URL with MODEL_API_KEY. Each provider's key
 * is read from the variable its entry names; a missing one is a startup error naming it, never a
 * request sent without a key. Entries with the same base URL, key and timeout share one provider.
 */
export function hostModelsFromEnv(env: Record<string, string | undefined>, registryText?: string): HostModels {
  const blank = (v: string | undefined) => v === undefined || v.trim() === "";
  const inline = blank(env.MODEL_REGISTRY) ? undefined : env.MODEL_REGISTRY;
  if (inline !== undefined && registryText !== undefined) {
    throw new ModelConfigError(
      "invalid model configuration: set MODEL_REGISTRY or MODEL_REGISTRY_FILE, not both (which one would win is not obvious)",
    );
  }
  const raw = inline ?? registryText;
  if (raw === undefined) {
    const config = modelConfigFromEnv(env);
    const catalog = modelCatalogFromEnv(env);
    const { model: _default, ...shared } = config;
    return {
      catalog,
      providers: [{ config: shared, upstream: new Map(catalog.entries.map((e) => [e.name, e.name])) }],
    };
  }

  const source = inline !== undefined ? "MODEL_REGISTRY" : `MODEL_REGISTRY_FILE (${env.MODEL_REGISTRY_FILE ?? "?"})`;
  const catalog = parseModelRegistry(raw);
  if (typeof catalog === "string") throw new ModelConfigError(`invalid model configuration: ${source}: ${catalog}`);
  const timeout = blank(env.MODEL_TIMEOUT_MS)
    ? undefined
    : EnvSchema.shape.MODEL_TIMEOUT_MS.safeParse(env.MODEL_TIMEOUT_MS?.trim());
  if (timeout && !timeout.success) {
    throw new ModelConfigError(
      "invalid model configuration: MODEL_TIMEOUT_MS must be a positive integer number of milliseconds",
    );
  }
  const defaultTimeoutMs = timeout?.data;
  const problems: string[] = [];
  const providers = new Map<string, HostProvider>();
  for (const entry of catalog.entries) {
    let config: Omit<ModelConfig, "model">;
    if (entry.provider) {
      const key = env[entry.provider.apiKeyEnv]?.trim();
      if (!key) {
        problems.push(`${entry.provider.apiKeyEnv} (the key of model "${entry.name}") is not set`);
        continue;
      }
      const timeoutMs = entry.provider.timeoutMs ?? defaultTimeoutMs;
      config = { baseUrl: entry.provider.baseUrl, apiKey: key, ...(timeoutMs !== undefined ? { timeoutMs } : {}) };
    } else {
      const baseUrl = env.MODEL_BASE_URL?.trim();
      const key = env.MODEL_API_KEY?.trim();
      if (!baseUrl || !key) {
        problems.push(`model "${entry.name}" has no base_url, so MODEL_BASE_URL and MODEL_API_KEY must be set`);
        continue;
      }
      if (!/^https?:\/\//.test(baseUrl) || !URL.canParse(baseUrl)) {
        problems.push("MODEL_BASE_URL must be an http(s) URL, e.g. https://api.openai.com/v1");
        continue;
      }
      config = { baseUrl, apiKey: key, ...(defaultTimeoutMs !== undefined ? { timeoutMs: defaultTimeoutMs } : {}) };
    }
    const id = JSON.stringify([config.baseUrl, config.apiKey, config.timeoutMs ?? null]);
    let provider = providers.get(id);
    if (!provider) {
      provider = { config, upstream: new Map() };
      providers.set(id, provider);
    }
    provider.upstream.set(entry.name, entry.provider?.upstreamModel ?? entry.name);
  }
  if (problems.length > 0) throw new ModelConfigError(`invalid model configuration: ${problems.join("; ")}`);
  return { catalog, providers: [...providers.values()] };
}
