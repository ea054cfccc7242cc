import { defineConfig } from "vitest/config";

// Unit tests are pure; integration tests run against real Postgres, Redis, workerd and Docker,
// each suite starting its own services on free loopback ports (test/helpers/).
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "unit",
          // workers/middleware/: each middleware's own test beside it, on a bare hono app; their
          // imports need no workerd (the bindings they read come in as a plain env object).
          include: [
            "test/unit/**/*.test.ts",
            "src/**/*.test.ts",
            "tools/**/*.unit.test.ts",
            "workers/middleware/**/*.test.ts",
          ],
          environment: "node",
        },
      },
      {
        test: {
          name: "integration",
          include: ["test/integration/**/*.test.ts"],
          environment: "node",
          testTimeout: 60_000,
          hookTimeout: 120_000,
          // 2 cores: suites start their own Postgres/Redis/workerd; two at a time keeps them honest.
          maxWorkers: 2,
        },
      },
      {
        test: {
          // The web console in Chromium against a whole stack (test/helpers/browser.ts).
          name: "browser",
          include: ["test/browser/**/*.test.ts"],
          environment: "node",
          testTimeout: 90_000,
          hookTimeout: 180_000,
          maxWorkers: 1,
        },
      },
    ],
  },
});
