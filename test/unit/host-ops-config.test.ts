/**
 * The host's operations knobs as main.ts reads them: the metrics listener's address, the queue
 * depth sampler's interval, and where the LISTEN connection goes when DATABASE_URL is a Neon
 * pooler URL (LISTEN is never delivered through a transaction pooler).
 */
import { describe, expect, it } from "vitest";
import { HostConfigError, hostConfigFromEnv, listenDatabaseUrl, reservedSlotsOf } from "../../sandbox-host/host-config";
import { isPoolerUrl } from "../../src/db/pooler-url";
import { applyMigrations } from "../../tools/stack/migrate";
import { MINIMAL_HOST_ENV } from "../helpers/host-env";

const POOLED = "postgres://u:p@ep-cool-bird-123456-pooler.eu-central-1.aws.neon.tech/db?sslmode=require";
const DIRECT = "postgres://u:p@ep-cool-bird-123456.eu-central-1.aws.neon.tech/db?sslmode=require";

function problems(env: Record<string, string>): string[] {
  try {
    hostConfigFromEnv({ ...MINIMAL_HOST_ENV, ...env });
  } catch (err) {
    if (err instanceof HostConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe("metrics listener address", () => {
  it("is loopback unless HOST_METRICS_HOST says otherwise", () => {
    expect(hostConfigFromEnv(MINIMAL_HOST_ENV).metricsHost).toBe("127.0.0.1");
    expect(hostConfigFromEnv({ ...MINIMAL_HOST_ENV, HOST_METRICS_HOST: "0.0.0.0" }).metricsHost).toBe("0.0.0.0");
  });
});

describe("queue depth interval", () => {
  it("defaults to 15 s, 0 turns it off, and a sub-second interval is refused by name", () => {
    expect(hostConfigFromEnv(MINIMAL_HOST_ENV).queueDepthMs).toBe(15_000);
    expect(hostConfigFromEnv({ ...MINIMAL_HOST_ENV, HOST_QUEUE_DEPTH_MS: "0" }).queueDepthMs).toBe(0);
    expect(problems({ HOST_QUEUE_DEPTH_MS: "200" })).toEqual([expect.stringMatching(/^HOST_QUEUE_DEPTH_MS: /)]);
  });
});

describe("newcomer reserve", () => {
  const reserve = (env: Record<string, string>) => reservedSlotsOf(hostConfigFromEnv({ ...MINIMAL_HOST_ENV, ...env }));
  it("keeps 1 slot in 8 unless HOST_RESERVED_SLOTS says otherwise; 0 turns it off", () => {
    expect(reserve({})).toBe(1);
    expect(reserve({ HOST_MAX_RUNS: "4" })).toBe(0);
    expect(reserve({ HOST_MAX_RUNS: "16" })).toBe(2);
    expect(reserve({ HOST_MAX_RUNS: "4", HOST_RESERVED_SLOTS: "1" })).toBe(1);
    expect(reserve({ HOST_RESERVED_SLOTS: "0" })).toBe(0);
  });

  it("refuses a reserve of every slot, by name", () => {
    expect(problems({ HOST_MAX_RUNS: "4", HOST_RESERVED_SLOTS: "4" })).toEqual([
      expect.stringMatching(/^HOST_RESERVED_SLOTS: must be less than HOST_MAX_RUNS \(4\)/),
    ]);
    expect(problems({ HOST_RESERVED_SLOTS: "-1" })).toEqual([expect.stringMatching(/^HOST_RESERVED_SLOTS: /)]);
  });
});

describe("the LISTEN connection", () => {
  it("recognises Neon pooler host names and nothing else", () => {
    expect(isPoolerUrl(POOLED)).toBe(true);
    expect(isPoolerUrl(DIRECT)).toBe(false);
    expect(isPoolerUrl(MINIMAL_HOST_ENV.DATABASE_URL)).toBe(false);
    expect(isPoolerUrl("not a url")).toBe(false);
  });

  it("uses DATABASE_URL when it is direct", () => {
    expect(listenDatabaseUrl(hostConfigFromEnv(MINIMAL_HOST_ENV))).toEqual({ url: MINIMAL_HOST_ENV.DATABASE_URL });
  });

  it("uses DATABASE_DIRECT_URL when given, pooled DATABASE_URL or not", () => {
    const config = hostConfigFromEnv({ ...MINIMAL_HOST_ENV, DATABASE_URL: POOLED, DATABASE_DIRECT_URL: DIRECT });
    expect(config.databaseUrl).toBe(POOLED);
    expect(listenDatabaseUrl(config)).toEqual({ url: DIRECT });
  });

  it("is off, with a warning naming DATABASE_DIRECT_URL, for a pooler URL without a direct one", () => {
    const target = listenDatabaseUrl(hostConfigFromEnv({ ...MINIMAL_HOST_ENV, DATABASE_URL: POOLED }));
    expect(target.url).toBeNull();
    expect(target.warning).toMatch(/pooler.*DATABASE_DIRECT_URL/);
  });

  it("is off without a warning when HOST_LISTEN=false", () => {
    expect(
      listenDatabaseUrl(hostConfigFromEnv({ ...MINIMAL_HOST_ENV, HOST_LISTEN: "false", DATABASE_URL: POOLED })),
    ).toEqual({
      url: null,
      warning: null,
    });
  });

  it("refuses a DATABASE_DIRECT_URL that is not a postgres URL, by name", () => {
    expect(problems({ DATABASE_DIRECT_URL: "http://x" })).toEqual([expect.stringMatching(/^DATABASE_DIRECT_URL: /)]);
  });
});

describe("migrations through a pooler", () => {
  it("are refused before connecting: the migration lock is session state a transaction pooler drops", async () => {
    await expect(applyMigrations(POOLED)).rejects.toThrow(/pooler URL.*DATABASE_DIRECT_URL/);
  });
});
