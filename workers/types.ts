/** Hono's type parameters for the gateway: bindings plus what middleware puts on the context. */
import type { GatewayConfig } from "./config";
import type { Deps } from "./deps";
import type { Env } from "./env";

export interface GatewayVariables {
  config: GatewayConfig;
  deps: Deps;
  /** Set by the API-key middleware on every /v1 route. */
  tenantId: string;
  /** SHA-256 of the presented API key, set with tenantId: the request-rate identity. */
  apiKeyHash: string;
}

export type GatewayEnv = { Bindings: Env; Variables: GatewayVariables };
