/** The least environment a sandbox-host accepts (sandbox-host/host-config.ts), for config tests. */
export const MINIMAL_HOST_ENV = {
  DATABASE_URL: "postgres://u:p@127.0.0.1:5432/db",
  UPSTASH_REDIS_REST_URL: "http://127.0.0.1:8079",
  UPSTASH_REDIS_REST_TOKEN: "t",
  GATEWAY_URL: "http://127.0.0.1:8787",
  INTERNAL_SIGNING_SECRET: "0123456789abcdef",
};
