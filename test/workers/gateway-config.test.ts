import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../workers/config";
import type { Env } from "../../workers/env";

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

  it("takes the previous signing secret during a rotation, current first; empty means unset", () => {
    expect(loadConfig(asEnv({ ...base })).signingSecrets).toEqual([base.INTERNAL_SIGNING_SECRET]);
    const rotating = loadConfig(asEnv({ ...base, INTERNAL_SIGNING_SECRET_PREVIOUS: "fedcba9876543210" }));
    expect(rotating.signingSecrets).toEqual([base.INTERNAL_SIGNING_SECRET, "fedcba9876543210"]);
    expect(loadConfig(asEnv({ ...base, INTERNAL_SIGNING_SECRET_PREVIOUS: "" })).signingSecrets).toHaveLength(1);
    expect(() => loadConfig(asEnv({ ...base, INTERNAL_SIGNING_SECRET_PREVIOUS: "short" }))).toThrow(
      /INTERNAL_SIGNING_SECRET_PREVIOUS/,
    );
  });
});
