import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";
import { ensureConsoleBuilt } from "./tools/build/console";

// wrangler.toml's [assets] directory (the console's build) must exist when the plugin reads it.
await ensureConsoleBuilt();

// Gateway Worker + JobEvents DO tests, run inside workerd (wrangler 4.86.0's). No Postgres or
// Redis: their URLs point at a closed loopback port, so the "dependency down" paths are real.
export default defineConfig({
  plugins: [
    cloudflareTest({
      wrangler: { configPath: "./wrangler.toml" },
      miniflare: {
        bindings: {
          DATABASE_URL: "postgres://ear:ear@127.0.0.1:1/ear",
          NEON_FETCH_ENDPOINT: "http://127.0.0.1:1/sql",
          UPSTASH_REDIS_REST_URL: "http://127.0.0.1:1",
          UPSTASH_REDIS_REST_TOKEN: "test-token",
          INTERNAL_SIGNING_SECRET: "test-signing-secret-0123456789",
          // A rotation in progress: requests signed with the previous secret are still accepted.
          INTERNAL_SIGNING_SECRET_PREVIOUS: "test-previous-secret-0123456789",
          // Browser access: one allowed origin, and a token-secret rotation in progress.
          CORS_ALLOWED_ORIGINS: "https://console.test, http://localhost:5173",
          TOKEN_SIGNING_SECRET: "test-token-secret-0123456789abcdef",
          TOKEN_SIGNING_SECRET_PREVIOUS: "test-old-token-secret-0123456789ab",
          // Short keepalive so the heartbeat is observable in a test.
          SSE_HEARTBEAT_MS: "200",
        },
      },
    }),
  ],
  test: {
    name: "workers",
    include: ["test/workers/**/*.test.ts"],
    // The first Durable Object call of a file loads the Worker through Vite's module runner:
    // ~10 s on a 2-core machine, so the default 5 s would fail whichever test runs first.
    testTimeout: 30_000,
  },
});
