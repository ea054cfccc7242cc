/**
 * The dev stack's dev-only allowances: loopback webhooks, MCP servers and page origins on any
 * port, only where the developer did not set the variable, and in no production configuration.
 */
import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { type AllowedUrl, isUrlAllowed, parseAllowedUrls } from "../../src/domain/mcp";
import { DEV_ONLY_DEFAULTS, devOnlyDefaults } from "./dev-defaults";

const ROOT = resolve(import.meta.dirname, "..", "..");

async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await filesUnder(p)));
    else out.push(p);
  }
  return out;
}

describe("npm run dev's dev-only defaults", () => {
  it("admit a webhook receiver, an MCP server and a page on this machine, on any port", () => {
    const defaults = devOnlyDefaults({});
    expect(Object.keys(defaults).sort()).toEqual([
      "CORS_ALLOWED_ORIGINS",
      "MAX_QUEUED_JOBS_PER_TENANT",
      "MAX_STREAMS_PER_TENANT",
      "MCP_ALLOWED_URLS",
      "QUOTA_TENANT_LIMIT",
      "RATE_LIMIT_REQUESTS",
      "WEBHOOK_ALLOWED_URLS",
    ]);
    const hooks = parseAllowedUrls(defaults.WEBHOOK_ALLOWED_URLS) as AllowedUrl[];
    expect(isUrlAllowed("http://127.0.0.1:4000/hook", hooks)).toBe(true);
    expect(isUrlAllowed("http://localhost:3000/hook", hooks)).toBe(true);
    expect(isUrlAllowed("https://example.com/hook", hooks)).toBe(false);
    // Origins: workers/middleware/cors/cors.test.ts checks these entries admit any port of their host.
    expect(defaults.CORS_ALLOWED_ORIGINS).toBe("http://localhost:*,http://127.0.0.1:*");
  });

  it("let the load ladder's 1,000 runs at once through one tenant's limits", () => {
    const defaults = devOnlyDefaults({});
    // Per run: a submit, a stream and a read-back, all within the rate limit's window.
    expect(Number(defaults.RATE_LIMIT_REQUESTS)).toBeGreaterThanOrEqual(3 * 1000 * 10);
    expect(Number(defaults.MAX_STREAMS_PER_TENANT)).toBeGreaterThanOrEqual(1000 * 10);
    expect(Number(defaults.MAX_QUEUED_JOBS_PER_TENANT)).toBeGreaterThanOrEqual(1000 * 10);
    // No per-tenant share of the model's slots: one tenant's 1,000 runs are not held to 32.
    expect(defaults.QUOTA_TENANT_LIMIT).toBe("0");
  });

  it("leave a variable the developer set alone", () => {
    expect(devOnlyDefaults({ WEBHOOK_ALLOWED_URLS: "https://hooks.example.com/" })).not.toHaveProperty(
      "WEBHOOK_ALLOWED_URLS",
    );
    expect(devOnlyDefaults({ CORS_ALLOWED_ORIGINS: " " })).toHaveProperty("CORS_ALLOWED_ORIGINS");
  });

  it("are in no production configuration (wrangler.toml, deploy/)", async () => {
    const files = [join(ROOT, "wrangler.toml"), ...(await filesUnder(join(ROOT, "deploy")))];
    for (const file of files) {
      const text = await readFile(file, "utf8").catch(() => "");
      // The allowlists (URL patterns); the limits are numbers any file may contain.
      for (const value of Object.values(DEV_ONLY_DEFAULTS).filter((v) => v.includes("://"))) {
        for (const entry of value.split(",")) expect(text, file).not.toContain(entry);
      }
    }
  });
});
