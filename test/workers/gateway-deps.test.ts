/**
 * The gateway's dependency handles (workers/deps.ts) are built once per isolate, not per request:
 * an @upstash/redis client defines a closure per Redis command on construction, which a burst of
 * submits paid once per request. Sharing is safe only without auto-pipelining (each command is
 * then its own fetch, made by the request that issued it).
 */
import { describe, expect, it } from "vitest";
import { createDeps } from "../../workers/deps";
import type { GatewayConfig } from "../../workers/gateway-config";

function config(redisUrl: string): GatewayConfig {
  return {
    databaseUrl: "postgres://u:p@127.0.0.1:1/db",
    neonFetchEndpoint: "http://127.0.0.1:1/sql",
    redis: { url: redisUrl, token: "t" },
  } as GatewayConfig;
}

describe("gateway deps", () => {
  it("every request of an isolate gets the same Redis client, with auto-pipelining off", () => {
    const a = createDeps(config("http://127.0.0.1:1")).redis();
    const b = createDeps(config("http://127.0.0.1:1")).redis();
    expect(b).toBe(a);
    expect((a as unknown as { enableAutoPipelining: boolean }).enableAutoPipelining).toBe(false);
  });

  it("a different Redis endpoint gets its own client", () => {
    const a = createDeps(config("http://127.0.0.1:1")).redis();
    const c = createDeps(config("http://127.0.0.1:2")).redis();
    expect(c).not.toBe(a);
  });

  it("the drizzle handle is shared too", () => {
    expect(createDeps(config("http://127.0.0.1:1")).db()).toBe(createDeps(config("http://127.0.0.1:1")).db());
  });
});
