/** Hono's type parameters for the gateway: bindings plus what middleware puts on the context. */

import type { Deps } from "./deps";
import type { Env } from "./env";
import type { GatewayConfig } from "./gateway-config";
import type { AccessGrant } from "./middleware/auth/access-tokens";

export interface GatewayVariables {
  config: GatewayConfig;
  deps: Deps;
  /** Set by the auth middleware on every /v1 route. */
  tenantId: string;
  /**
   * SHA-256 of the presented API key, or of the key that minted the presented token (its `kh`),
   * set with tenantId: the request-rate identity.
   */
  apiKeyHash: string;
  /** What authenticated the request: an API key, or a token with its grant. */
  access: { kind: "api_key" } | { kind: "token"; grant: AccessGrant };
}

export type GatewayEnv = { Bindings: Env; Variables: GatewayVariables };
