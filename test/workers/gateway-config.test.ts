import { describe, expect, it } from "vitest";
import type { Env } from "../../workers/env";
import { BACKSTOP_DEFAULTS, ConfigError, LIMIT_DEFAULTS, loadConfig } from "../../workers/gateway-config";
import { mintToken, verifyToken } from "../../workers/middleware/auth/access-tokens";

const base = {
  DATABASE_URL: "postgres://u:p@127.0.0.1:5432/db",
  UPSTASH_REDIS_REST_URL: "http://127.0.0.1:8079",
  UPSTASH_REDIS_REST_TOKEN: "t",
  INTERNAL_SIGNING_SECRET: "0123456789abcdef",
};
const asEnv = (vars: Record<string, string>) => vars as unknown as Env;

describe("gateway configuration", () => {
  it("is parsed once per set of values, not per env object", () => {
    // workerd passes a fresh env object per request: equal values must give the same parse.
    const a = loadConfig(asEnv({ ...base }));
    expect(loadConfig(asEnv({ ...base }))).toBe(a);
    expect(a.maxBodyBytes).toBeGreaterThan(0);
  });

  it("follows changed values and reports a broken setting each time it is asked", () => {
    const other = loadConfig(asEnv({ ...base, MAX_BODY_BYTES: "1234" }));
    expect(other.maxBodyBytes).toBe(1234);
    const broken = asEnv({ ...base, UPSTASH_REDIS_REST_URL: "not a url" });
    expect(() => loadConfig(broken)).toThrow(ConfigError);
    expect(() => loadConfig(broken)).toThrow(/UPSTASH_REDIS_REST_URL/);
    expect(loadConfig(asEnv({ ...base })).maxBodyBytes).not.toBe(1234);
  });

  it("has every abuse limit on by default, each overridable, 0 turning it off", () => {
    const limits = loadConfig(asEnv({ ...base })).limits;
    expect(limits).toEqual(LIMIT_DEFAULTS);
    for (const v of Object.values(limits)) expect(v).toBeGreaterThan(0);
    const set = loadConfig(
      asEnv({
        ...base,
        RATE_LIMIT_REQUESTS: "0",
        MAX_STREAMS_PER_TENANT: "7",
        MAX_QUEUED_JOBS_PER_TENANT: "9",
        MAX_AGENTS_PER_TENANT: "3",
        MAX_VERSIONS_PER_AGENT: "0",
        MAX_AGENT_BYTES_PER_TENANT: "5000",
      }),
    ).limits;
    expect(set).toMatchObject({
      rateLimitRequests: 0,
      maxStreamsPerTenant: 7,
      maxQueuedJobsPerTenant: 9,
      maxAgentsPerTenant: 3,
      maxVersionsPerAgent: 0,
      maxAgentBytesPerTenant: 5000,
    });
    expect(() => loadConfig(asEnv({ ...base, MAX_AGENTS_PER_TENANT: "x" }))).toThrow(/MAX_AGENTS_PER_TENANT/);
    expect(() => loadConfig(asEnv({ ...base, MAX_STREAMS_PER_TENANT: "-1" }))).toThrow(/MAX_STREAMS_PER_TENANT/);
  });

  it("keeps a client's trace context as a link unless OTEL_TRUST_CLIENT_SAMPLING is true, and refuses another value", () => {
    expect(loadConfig(asEnv({ ...base })).trustClientSampling).toBe(false);
    expect(loadConfig(asEnv({ ...base, OTEL_TRUST_CLIENT_SAMPLING: "false" })).trustClientSampling).toBe(false);
    expect(loadConfig(asEnv({ ...base, OTEL_TRUST_CLIENT_SAMPLING: "true" })).trustClientSampling).toBe(true);
    expect(() => loadConfig(asEnv({ ...base, OTEL_TRUST_CLIENT_SAMPLING: "yes" }))).toThrow(
      /OTEL_TRUST_CLIENT_SAMPLING/,
    );
  });

  it("reads MCP_ALLOWED_URLS (empty: MCP off) and MCP_SECRET_NAMES (unset: not checked; name or name:tenant|…), and names a bad entry", () => {
    expect(loadConfig(asEnv({ ...base })).mcp).toEqual({ allowedUrls: [], secretNames: null });
    const mcp = loadConfig(
      asEnv({ ...base, MCP_ALLOWED_URLS: "https://mcp.example.com/tools", MCP_SECRET_NAMES: " a , b:acme|beta," }),
    ).mcp;
    expect(mcp).toEqual({
      allowedUrls: [{ origin: "https://mcp.example.com", path: "/tools/", exact: "/tools" }],
      secretNames: new Map<string, string[] | null>([
        ["a", null],
        ["b", ["acme", "beta"]],
      ]),
    });
    expect(() => loadConfig(asEnv({ ...base, MCP_SECRET_NAMES: "a:Acme Corp" }))).toThrow(
      /MCP_SECRET_NAMES: "a": "Acme Corp" is not a tenant id/,
    );
    expect(() => loadConfig(asEnv({ ...base, MCP_ALLOWED_URLS: "ftp://x" }))).toThrow(
      /MCP_ALLOWED_URLS: "ftp:\/\/x" is not an http\(s\) URL/,
    );
  });

  it("offers no model choice without MODELS, and exactly the listed ones with it", () => {
    expect(loadConfig(asEnv({ ...base })).models.entries).toEqual([]);
    expect(
      loadConfig(asEnv({ ...base, MODELS: " gpt-4o-mini , claude-x " })).models.entries.map((e) => e.name),
    ).toEqual(["gpt-4o-mini", "claude-x"]);
    expect(() => loadConfig(asEnv({ ...base, MODELS: "a,,b" }))).toThrow(/MODELS: an empty name/);
    expect(() => loadConfig(asEnv({ ...base, MODELS: "a,a" }))).toThrow(/listed twice/);
  });

  it("reads MODEL_REGISTRY (default first, allow-lists kept), preferred to MODELS, and names what is wrong with it", () => {
    const registry = JSON.stringify({
      default: "small",
      models: [
        { name: "big", base_url: "https://p.example/v1", api_key_env: "P_KEY", tenants: ["t1"] },
        { name: "small" },
      ],
    });
    const models = loadConfig(asEnv({ ...base, MODELS: "other", MODEL_REGISTRY: registry })).models;
    expect(models.entries.map((e) => e.name)).toEqual(["small", "big"]);
    expect(models.entries[1]?.tenants).toEqual(["t1"]);
    expect(() => loadConfig(asEnv({ ...base, MODEL_REGISTRY: "{" }))).toThrow(/MODEL_REGISTRY: not JSON/);
    expect(() => loadConfig(asEnv({ ...base, MODEL_REGISTRY: '{"models":[]}' }))).toThrow(/MODEL_REGISTRY: models/);
    // Empty means unset (`--var NAME:`): MODELS applies.
    expect(loadConfig(asEnv({ ...base, MODELS: "m", MODEL_REGISTRY: "" })).models.entries).toEqual([{ name: "m" }]);
  });

  it("takes the previous signing secret during a rotation, current first; empty means unset", () => {
    expect(loadConfig(asEnv({ ...base })).signingSecrets).toEqual([base.INTERNAL_SIGNING_SECRET]);
    const rotating = loadConfig(asEnv({ ...base, INTERNAL_SIGNING_SECRET_PREVIOUS: "fedcba9876543210" }));
    expect(rotating.signingSecrets).toEqual([base.INTERNAL_SIGNING_SECRET, "fedcba9876543210"]);
    expect(loadConfig(asEnv({ ...base, INTERNAL_SIGNING_SECRET_PREVIOUS: "" })).signingSecrets).toHaveLength(1);
    expect(() => loadConfig(asEnv({ ...base, INTERNAL_SIGNING_SECRET_PREVIOUS: "short" }))).toThrow(
      /INTERNAL_SIGNING_SECRET_PREVIOUS/,
    );
  });

  it("gives the cron backstop the hosts' default thresholds, each overridable, nonsense refused", () => {
    expect(loadConfig(asEnv({ ...base })).backstop).toEqual(BACKSTOP_DEFAULTS);
    expect(
      loadConfig(asEnv({ ...base, REAPER_RUN_LOST_AFTER_MS: "30000", REAPER_CLAIM_TIMEOUT_MS: "20000" })).backstop,
    ).toEqual({ runLostAfterMs: 30_000, claimTimeoutMs: 20_000 });
    expect(() => loadConfig(asEnv({ ...base, REAPER_RUN_LOST_AFTER_MS: "5" }))).toThrow(/REAPER_RUN_LOST_AFTER_MS/);
    expect(() => loadConfig(asEnv({ ...base, REAPER_CLAIM_TIMEOUT_MS: "soon" }))).toThrow(/REAPER_CLAIM_TIMEOUT_MS/);
  });

  it("CORS_ALLOWED_ORIGINS: none by default, exact origins only", () => {
    expect(loadConfig(asEnv({ ...base })).corsAllowedOrigins).toEqual([]);
    expect(loadConfig(asEnv({ ...base, CORS_ALLOWED_ORIGINS: "" })).corsAllowedOrigins).toEqual([]);
    expect(
      loadConfig(asEnv({ ...base, CORS_ALLOWED_ORIGINS: " https://a.example.com , http://localhost:5173," }))
        .corsAllowedOrigins,
    ).toEqual(["https://a.example.com", "http://localhost:5173"]);
    // The one wildcard: any port of a loopback host (npm run dev's dev-only default).
    expect(
      loadConfig(asEnv({ ...base, CORS_ALLOWED_ORIGINS: "http://localhost:*,http://127.0.0.1:*" })).corsAllowedOrigins,
    ).toEqual(["http://localhost:*", "http://127.0.0.1:*"]);
    for (const bad of [
      "*",
      "https://a.example.com/",
      "https://a.example.com/path",
      "a.example.com",
      "ftp://x.y",
      "https://a.example.com:*",
      "http://localhost:*/x",
    ]) {
      expect(() => loadConfig(asEnv({ ...base, CORS_ALLOWED_ORIGINS: bad })), bad).toThrow(/CORS_ALLOWED_ORIGINS/);
    }
  });

  it("tokens live at least their ttl_s: one minted in a second's last millisecond is not dead on arrival", async () => {
    // Start early in a second, so the check below cannot straddle the next one.
    while (Date.now() % 1000 > 300) await new Promise((r) => setTimeout(r, 20));
    const config = loadConfig(asEnv({ ...base }));
    const lastMsOfPrevSecond = Math.floor(Date.now() / 1000) * 1000 - 1;
    const grant = { tenantId: "t1", keyHash: "a".repeat(64), scope: "read" as const, ttlS: 1 };
    const minted = await mintToken(config, grant, lastMsOfPrevSecond);
    expect(Date.parse(minted.expires_at)).toBeGreaterThanOrEqual(lastMsOfPrevSecond + 1000);
    expect(await verifyToken(config, minted.token)).toMatchObject({ tenantId: "t1" });
  });

  it("tokens: without TOKEN_SIGNING_SECRET the key is derived from the internal secret, rotations included", async () => {
    const grant = { tenantId: "t1", keyHash: "a".repeat(64), scope: "read" as const, ttlS: 60 };
    const derived = loadConfig(asEnv({ ...base }));
    expect(derived.tokenSecrets).toBeNull();
    const minted = await mintToken(derived, grant);
    expect(await verifyToken(derived, minted.token)).toMatchObject({ tenantId: "t1", scope: "read" });
    // The derived key is not the internal secret itself: a token signed with that is refused.
    const { sign } = await import("hono/jwt");
    const now = Math.floor(Date.now() / 1000);
    const claims = {
      iss: "ear",
      aud: "ear-api",
      sub: "t1",
      iat: now,
      exp: now + 60,
      scope: "read",
      kh: "a".repeat(64),
    };
    expect(await verifyToken(derived, await sign(claims, base.INTERNAL_SIGNING_SECRET))).toBeNull();
    // The internal secret rotated: tokens derived from the previous one still verify.
    const rotated = loadConfig(
      asEnv({
        ...base,
        INTERNAL_SIGNING_SECRET: "fedcba9876543210",
        INTERNAL_SIGNING_SECRET_PREVIOUS: base.INTERNAL_SIGNING_SECRET,
      }),
    );
    expect(await verifyToken(rotated, minted.token)).toMatchObject({ tenantId: "t1" });
    // An explicit token secret replaces the derived key: the old tokens no longer verify.
    const explicit = loadConfig(asEnv({ ...base, TOKEN_SIGNING_SECRET: "x".repeat(32) }));
    expect(explicit.tokenSecrets).toEqual(["x".repeat(32)]);
    expect(await verifyToken(explicit, minted.token)).toBeNull();
    expect(() => loadConfig(asEnv({ ...base, TOKEN_SIGNING_SECRET: "short" }))).toThrow(/TOKEN_SIGNING_SECRET/);
  });
});
