/**
 * A host added to a dev stack (`npm run host`) gets the settings the stack's hosts got: stack.json's
 * host_env, with a host variable in its own environment overriding, and the stack's wiring kept.
 */
import { describe, expect, it } from "vitest";
import { addedHostEnv, HOST_SETTING_VARS, hostSecretsIn, hostSettingsFrom } from "./host-env";

const wiring = {
  DATABASE_URL: "postgres://stack/db",
  UPSTASH_REDIS_REST_URL: "http://127.0.0.1:1",
  UPSTASH_REDIS_REST_TOKEN: "t",
  GATEWAY_URL: "http://127.0.0.1:8787",
  INTERNAL_SIGNING_SECRET: "s".repeat(32),
};

describe("the dev stack's host settings", () => {
  it("names every host setting the developer gave, and no wiring, per-host value or secret", () => {
    const env = {
      HOST_TOOLS: "examples/orders/order-tools.ts",
      HOST_MAX_RUNS: "4",
      MCP_SECRETS_FILE: "/tmp/s.json",
      OTEL_SERVICE_NAME: "dev",
      HOST_ID: "mine",
      MCP_SECRETS: '{"k":"v"}',
      MODEL_API_KEY: "sk-real",
      DATABASE_URL: "postgres://elsewhere/db",
      PATH: "/bin",
      HOST_POLL_MS: "",
    };
    expect(hostSettingsFrom(env)).toEqual({
      HOST_TOOLS: "examples/orders/order-tools.ts",
      HOST_MAX_RUNS: "4",
      MCP_SECRETS_FILE: "/tmp/s.json",
      OTEL_SERVICE_NAME: "dev",
    });
    expect(hostSecretsIn(env)).toEqual(["MODEL_API_KEY", "MCP_SECRETS"]);
    for (const n of ["HOST_TOOLS", "WEBHOOK_ALLOWED_URLS", "MCP_ALLOWED_URLS", "HOST_TOOLS_CONCURRENCY"]) {
      expect(HOST_SETTING_VARS).toContain(n);
    }
  });

  it("an added host starts from stack.json's host_env: the same HOST_TOOLS and allowlists", () => {
    const stack = {
      host_env: {
        ...wiring,
        HOST_TOOLS: "tools.ts",
        WEBHOOK_ALLOWED_URLS: "http://127.0.0.1:*",
        HOST_METRICS_PORT: "0",
      },
    };
    const { env, missingSecrets } = addedHostEnv(stack, { PATH: "/bin" });
    expect(env).toEqual({ ...stack.host_env, HOST_METRICS_PORT: "0" });
    expect(missingSecrets).toEqual([]);
  });

  it("a host variable set by the caller overrides; the stack's wiring does not change", () => {
    const stack = { host_env: { ...wiring, HOST_TOOLS: "tools.ts", HOST_MAX_RUNS: "8" } };
    const { env } = addedHostEnv(stack, {
      HOST_TOOLS: "other-tools.ts",
      HOST_ID: "added",
      HOST_MAX_RUNS: "",
      DATABASE_URL: "postgres://elsewhere/db",
      GATEWAY_URL: "http://elsewhere",
    });
    expect(env.HOST_TOOLS).toBe("other-tools.ts");
    expect(env.HOST_ID).toBe("added");
    expect(env.HOST_MAX_RUNS).toBe("8"); // empty counts as unset
    expect(env.DATABASE_URL).toBe(wiring.DATABASE_URL);
    expect(env.GATEWAY_URL).toBe(wiring.GATEWAY_URL);
  });

  it("says which secrets the stack's hosts had that the caller does not give", () => {
    const stack = { host_env: { ...wiring, MODEL_API_KEY: "" }, host_secrets: ["MODEL_API_KEY", "MCP_SECRETS"] };
    expect(addedHostEnv(stack, {}).missingSecrets).toEqual(["MODEL_API_KEY", "MCP_SECRETS"]);
    const given = addedHostEnv(stack, { MODEL_API_KEY: "sk", MCP_SECRETS: "{}" });
    expect(given.missingSecrets).toEqual([]);
    expect(given.env.MODEL_API_KEY).toBe("sk");
  });
});
