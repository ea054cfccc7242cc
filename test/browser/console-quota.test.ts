/**
 * The debug panel's quota waits, from a real wait: a stack whose host admits one model call at a
 * time (QUOTA_MODEL_LIMIT=1), one slow job holding the slot, and a second job that waits for it.
 * Its own stack, because that limit would serialize every other browser test.
 */
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobView } from "../../src/contracts/job";
import { apiClient, userMessage } from "../helpers/api";
import { type BrowserHandle, CHROMIUM, startBrowser } from "../helpers/browser";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) &&
  (await requireBinary(CHROMIUM, "apt-get install chromium"));

describe.runIf(canRun)("web console: quota waits in the debug panel", () => {
  const t = useStack({ hosts: 1, hostEnv: { QUOTA_MODEL_LIMIT: "1" } });
  let chrome: BrowserHandle;
  beforeAll(async () => {
    chrome = await startBrowser();
  }, 60_000);
  afterAll(async () => {
    await chrome?.close();
  });

  it("lists each quota.waiting event of a run that waited for a model slot", async () => {
    const api = apiClient(t.stack.gatewayUrl, t.stack.apiKey);
    const submit = async (content: string) =>
      (await api.call<{ job: JobView }>("POST", "/v1/jobs", userMessage(content))).body.job.id;
    const holder = await submit(`!mock ${JSON.stringify({ tokens: 40, tokens_per_s: 10 })}`);
    await expect
      .poll(async () => (await api.call<{ job: JobView }>("GET", `/v1/jobs/${holder}`)).body.job.first_output_at, {
        timeout: 20_000,
      })
      .not.toBeNull();
    const waiter = await submit("waits for the slot");
    const log = await api.events(waiter);
    const waits = log.filter((e) => e.event === "quota.waiting");
    expect(waits.length).toBeGreaterThan(0);

    const page: Page = await chrome.browser.contexts()[0]!.newPage();
    await page.goto(`${t.stack.gatewayUrl}/#key=${encodeURIComponent(t.stack.apiKey)}&next=/jobs/${waiter}`);
    await expect
      .poll(() => page.getByTestId("timeline").locator("tbody tr").count(), { timeout: 20_000 })
      .toBe(log.length);
    const shown = await page.getByTestId("quota-waits").locator("li").allTextContents();
    expect(shown).toHaveLength(waits.length);
    for (const [i, w] of waits.entries()) {
      const p = JSON.parse(w.data).payload as { reason: string; key: string | null; ahead: number | null };
      expect(shown[i]).toContain(`#${w.id} `);
      expect(shown[i]).toContain(`${p.reason}${p.key ? ` on ${p.key}` : ""}`);
    }
    expect(shown[0]).toContain("limit_reached on model:");
    await page.close();
  });
});
