/**
 * A dev stack's host settings, and the env of a host joined to it later (`npm run host`).
 *
 * The stack's hosts are spawned with its own environment, so a setting the developer gave
 * `npm run dev` (HOST_TOOLS, MCP_ALLOWED_URLS, a tuning knob) reached them without being written
 * anywhere; a host added from another terminal had none of it, and a job whose agent lists a
 * HOST_TOOLS tool ended there with `tool_unavailable`. So the stack names them in its hosts' env
 * (and .dev/stack.json's `host_env`), and an added host starts from that.
 */
import { HOST_ENV_NAMES } from "../../sandbox-host/host-config";
import { MCP_ENV_NAMES } from "../../sandbox-host/mcp/mcp-config";
import { MODEL_ENV_NAMES } from "../../sandbox-host/model/provider-config";
import { TRACING_ENV_NAMES } from "../../sandbox-host/tracing/tracing";

/** What joins a host to this stack: the stack's own addresses and secret, never another's. */
export const STACK_WIRING_VARS: readonly string[] = [
  "DATABASE_URL",
  "DATABASE_DIRECT_URL",
  "UPSTASH_REDIS_REST_URL",
  "UPSTASH_REDIS_REST_TOKEN",
  "GATEWAY_URL",
  "INTERNAL_SIGNING_SECRET",
];

/** Secrets a host reads: given to the stack's hosts, never written to .dev/stack.json (names only). */
export const HOST_SECRET_VARS: readonly string[] = ["MODEL_API_KEY", "MCP_SECRETS"];

/** Set per host, not shared: each host needs its own id and metrics port. */
const PER_HOST_VARS = ["HOST_ID", "HOST_METRICS_PORT"];

/** The stack sets these itself from its model options (tools/stack/start.ts). */
const STACK_MODEL_VARS = ["MODEL_BASE_URL", "MODEL_NAME", "MODELS", "MODEL_REGISTRY"];

/** Every variable a sandbox-host reads that is a setting (not wiring, not per host, not a secret). */
export const HOST_SETTING_VARS: readonly string[] = [
  ...new Set([...HOST_ENV_NAMES, ...MODEL_ENV_NAMES, ...MCP_ENV_NAMES, ...TRACING_ENV_NAMES]),
].filter(
  (n) =>
    !STACK_WIRING_VARS.includes(n) &&
    !HOST_SECRET_VARS.includes(n) &&
    !PER_HOST_VARS.includes(n) &&
    !STACK_MODEL_VARS.includes(n),
);

const set = (v: string | undefined): v is string => v !== undefined && v.trim() !== "";

/** The host settings present (non-empty) in `env`. */
export function hostSettingsFrom(env: Record<string, string | undefined>): Record<string, string> {
  return Object.fromEntries(HOST_SETTING_VARS.flatMap((n) => (set(env[n]) ? [[n, env[n]]] : [])));
}

/** The names of the host secrets present in `env` (for stack.json: which ones an added host needs too). */
export function hostSecretsIn(env: Record<string, string | undefined>): string[] {
  return HOST_SECRET_VARS.filter((n) => set(env[n]));
}

/**
 * The env of a host joining the stack: stack.json's `host_env`, with every host setting, secret
 * or per-host variable set in `env` (the caller's environment) taking precedence; the wiring
 * always the stack's (a host with another database or gateway would not be part of it).
 * `missingSecrets`: secrets the stack's hosts had that `env` does not give.
 */
export function addedHostEnv(
  stack: { host_env: Record<string, string>; host_secrets?: string[] },
  env: Record<string, string | undefined>,
): { env: Record<string, string>; missingSecrets: string[] } {
  const out: Record<string, string> = { ...stack.host_env, HOST_METRICS_PORT: "0" };
  for (const n of [...HOST_SETTING_VARS, ...HOST_SECRET_VARS, ...PER_HOST_VARS, ...STACK_MODEL_VARS]) {
    const v = env[n];
    if (set(v)) out[n] = v;
  }
  const missingSecrets = (stack.host_secrets ?? []).filter((n) => !set(env[n]) && !set(out[n]));
  return { env: out, missingSecrets };
}
