/**
 * Model provider configuration, parsed once at the process edge (sandbox-host/main.ts passes
 * its env in; nothing here reads process.env).
 */
import { z } from "zod";
import { type ModelCatalog, parseModelList } from "../../src/domain/models";

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

/** Every variable the model configuration reads (the deploy manifests' test checks against it). */
export const MODEL_ENV_NAMES: readonly string[] = [...Object.keys(EnvSchema.shape), "MODELS"];

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
