/**
 * POST /v1/webhooks up to the database: what the gateway decides from the body and
 * WEBHOOK_ALLOWED_URLS alone. These tests run without Postgres, so a request that gets past every
 * check ends in 503 dependency_unavailable, which is how a test shows a URL was accepted. The
 * routes with rows and real hosts are test/integration/webhooks.test.ts.
 */
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { generateApiKey, hashApiKey } from "../../src/domain/api-keys";
import { createApp } from "../../workers/app";
import { rememberTenant } from "../../workers/middleware/auth/tenant-cache";
import { testEnv } from "./helpers";

const app = createApp();
const ALLOWED = "https://hooks.example.com/hooks/";

async function create(url: string): Promise<{ status: number; error?: { code: string; message: string } }> {
  const { key } = generateApiKey();
  rememberTenant(await hashApiKey(key), "ta");
  const ctx = createExecutionContext();
  const res = await app.fetch(
    new Request("http://gateway.test/v1/webhooks", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ url, events: ["job.completed"] }),
    }),
    { ...testEnv, WEBHOOK_ALLOWED_URLS: ALLOWED },
    ctx,
  );
  await waitOnExecutionContext(ctx);
  const body = (await res.json()) as { error?: { code: string; message: string } };
  return { status: res.status, error: body.error };
}

describe("POST /v1/webhooks: where the URL may point", () => {
  it.each([
    ["an encoded climb out of the prefix", "https://hooks.example.com/hooks/..%2f..%2fadmin", /^url: not under/],
    ["a doubly encoded climb", "https://hooks.example.com/hooks/..%252f..%252fadmin", /^url: not under/],
    ["an encoded backslash climb", "https://hooks.example.com/hooks/..%5cadmin", /^url: not under/],
    ["the prefix without its slash", "https://hooks.example.com/hooks", /^url: not under/],
    ["a path that does not decode", "https://hooks.example.com/hooks/%E0%A4%A", /^url: not under/],
    ["credentials", "https://user:pw@hooks.example.com/hooks/x", /^url: must be an http\(s\) URL without credentials/],
    [
      "a user name alone",
      "https://user@hooks.example.com/hooks/x",
      /^url: must be an http\(s\) URL without credentials/,
    ],
    ["another scheme", "ftp://hooks.example.com/hooks/x", /^url: must be an http\(s\) URL/],
  ])("refuses %s with a 400 that says what", async (_label, url, message) => {
    const r = await create(url);
    expect([r.status, r.error?.code]).toEqual([400, "invalid_request"]);
    expect(r.error?.message).toMatch(message);
  });

  it.each([
    ["a path below the prefix", "https://hooks.example.com/hooks/orders"],
    ["the prefix itself", "https://hooks.example.com/hooks/"],
    ["an encoded slash that stays below the prefix", "https://hooks.example.com/hooks/a%2fb"],
  ])("accepts %s (it reaches the database: 503 without one)", async (_label, url) => {
    const r = await create(url);
    expect([r.status, r.error?.code]).toEqual([503, "dependency_unavailable"]);
  });
});
