/**
 * Liveness and readiness. /healthz answers whenever the isolate runs; /readyz asks Postgres
 * (`select 1`) and Redis (`PING`) in parallel, each bounded, and names whichever did not answer.
 */
import { sql } from "drizzle-orm";
import { HealthSchema, type Readiness, ReadinessSchema } from "../../src/contracts/health";
import { createDeps, withTimeout } from "../deps";
import { ConfigError, loadConfig } from "../gateway-config";
import { log } from "../log";
import { route, routes } from "./route";

/** Long enough for a cold Neon HTTP round trip (~100s of ms), short enough for a load balancer probe. */
const READY_TIMEOUT_MS = 1_500;

type Check = "ok" | "unavailable";

async function probe(work: () => Promise<unknown>, what: string): Promise<Check> {
  try {
    await withTimeout(work(), READY_TIMEOUT_MS, what);
    return "ok";
  } catch (err) {
    log.warn("readiness check failed", { dependency: what, error: err });
    return "unavailable";
  }
}

export const healthRoutes = routes(
  route({
    method: "get",
    path: "/healthz",
    operationId: "health",
    tag: "health",
    summary: "Liveness: answers whenever the Worker runs",
    auth: "none",
    responses: [{ status: 200, description: "The Worker runs.", schema: HealthSchema }],
    errors: [],
    handler: (c) => c.json({ ok: true }),
  }),
  route({
    method: "get",
    path: "/readyz",
    operationId: "ready",
    tag: "health",
    summary: "Readiness: Postgres and Redis both answer",
    auth: "none",
    responses: [
      { status: 200, description: "Both dependencies answered.", schema: ReadinessSchema },
      {
        status: 503,
        description:
          "A dependency did not answer (named, with `error.code` dependency_unavailable), or the gateway is misconfigured (only `ok` and `error`).",
        schema: ReadinessSchema,
      },
    ],
    errors: ["internal"],
    handler: async (c) => {
      let deps: ReturnType<typeof createDeps>;
      try {
        deps = createDeps(loadConfig(c.env));
      } catch (err) {
        if (!(err instanceof ConfigError)) throw err;
        log.error("readiness: invalid configuration", { error: err });
        return c.json(
          {
            ok: false,
            error: { code: "dependency_unavailable", message: "the gateway is misconfigured" },
          } satisfies Readiness,
          503,
        );
      }
      const [postgres, redis] = await Promise.all([
        probe(() => deps.db().execute(sql`select 1`), "postgres"),
        probe(() => deps.redis().ping(), "redis"),
      ]);
      if (postgres === "ok" && redis === "ok") return c.json({ ok: true, postgres, redis } satisfies Readiness);
      const down = [postgres === "ok" ? null : "postgres", redis === "ok" ? null : "redis"].filter(Boolean);
      return c.json(
        {
          ok: false,
          postgres,
          redis,
          error: { code: "dependency_unavailable", message: `${down.join(" and ")} did not answer` },
        } satisfies Readiness,
        503,
      );
    },
  }),
);
