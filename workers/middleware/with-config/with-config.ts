/**
 * Puts the parsed configuration and the lazy dependency handles on the context. A broken
 * configuration is the operator's bug, so it is a logged 500, not a 4xx for the client.
 */
import { createMiddleware } from "hono/factory";
import { ApiError } from "../../../src/contracts/errors";
import { createDeps } from "../../deps";
import { ConfigError, loadConfig } from "../../gateway-config";
import type { GatewayEnv } from "../../types";

export function withConfig() {
  return createMiddleware<GatewayEnv>(async (c, next) => {
    let config: ReturnType<typeof loadConfig>;
    try {
      config = loadConfig(c.env);
    } catch (err) {
      if (err instanceof ConfigError) throw new ApiError("internal", "the gateway is misconfigured", { cause: err });
      throw err;
    }
    c.set("config", config);
    c.set("deps", createDeps(config));
    await next();
  });
}
