/**
 * The console's schedules and webhooks pages against a real stack (one host, the mock model, an
 * endpoint this test serves): a bad cron shows the API's 400, a 6-field schedule's ticks show as
 * jobs on its page, disable and delete work; a webhook outside WEBHOOK_ALLOWED_URLS is refused,
 * an allowed one shows its secret once, its deliveries page shows both attempts of a delivery the
 * endpoint answered 500 once, and Retry sends it again. Each page passes axe.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { apiClient, userMessage } from "../helpers/api";
import { expectAccessible } from "../helpers/axe";
import { type BrowserHandle, CHROMIUM, consolePages, startBrowser } from "../helpers/browser";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) &&
  (await requireBinary(CHROMIUM, "apt-get install chromium"));

const hits = new Map<string, number>();
const server = createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    const id = String(req.headers["webhook-id"]);
    const n = (hits.get(id) ?? 0) + 1;
    hits.set(id, n);
    res.writeHead(n === 1 ? 500 : 204).end();
  });
});
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const HOOKS = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/`;

describe.runIf(canRun)("web console: schedules and webhooks", () => {
  const t = useStack({
    hosts: 1,
    gatewayVars: { WEBHOOK_ALLOWED_URLS: HOOKS },
    hostEnv: { WEBHOOK_ALLOWED_URLS: HOOKS, HOST_WEBHOOK_POLL_MS: "300" },
  });
  let chrome: BrowserHandle;
  const { open, shoot } = consolePages(
    () => chrome,
    () => t.stack.gatewayUrl,
    () => t.stack.apiKey,
  );
  beforeAll(async () => {
    chrome = await startBrowser();
  }, 60_000);
  afterAll(async () => {
    await chrome?.close();
    await new Promise((r) => server.close(r));
  });

  it("creates a schedule (a bad cron shows the 400) for an agent picked in the form, lists its ticks' jobs, disables and deletes it", async () => {
    const api = apiClient(t.stack.gatewayUrl, t.stack.apiKey);
    expect((await api.call("POST", "/v1/agents", { name: "ticker", model: "mock-model" })).status).toBe(201);
    const page = await open("/schedules");
    await page.getByRole("heading", { name: "Schedules" }).waitFor();
    const picker = page.getByLabel("Agent");
    await expect.poll(() => picker.locator("option").allTextContents()).toContain("ticker (latest v1)");
    await picker.selectOption("ticker");
    await page.getByLabel("Cron").fill("61 * * * *");
    await page.getByLabel("Message").fill("tick");
    await page.getByRole("button", { name: "Create schedule" }).click();
    await expect
      .poll(() => page.getByTestId("schedule-form").getByRole("alert").textContent())
      .toMatch(/^400 invalid_request: cron: /);
    await page.getByLabel("Cron").fill("*/2 * * * * *");
    await page.getByLabel("Message").fill("tick");
    await page.getByRole("button", { name: "Create schedule" }).click();
    const row = page.getByTestId("schedules-table").locator("tr[data-schedule-id]");
    await expect.poll(() => row.count()).toBe(1);
    const id = (await row.getAttribute("data-schedule-id")) as string;
    expect(await row.getByTestId("schedule-agent").textContent()).toBe("ticker");
    // The catch-up select shows each option's whole text: measured in the select's own font, plus
    // room for its arrow, every option fits its width.
    const widths = await page.locator("#schedule-catch-up").evaluate((el) => {
      const s = el as HTMLSelectElement;
      const ctx = document.createElement("canvas").getContext("2d") as CanvasRenderingContext2D;
      ctx.font = getComputedStyle(s).font;
      return { box: s.clientWidth, texts: [...s.options].map((o) => ctx.measureText(o.text).width + 24) };
    });
    for (const w of widths.texts) expect(w).toBeLessThanOrEqual(widths.box);
    await expectAccessible(page, "schedules list");
    await shoot(page, "schedules-list");

    await page.goto(`${t.stack.gatewayUrl}/#/schedules/${id}`);
    await expect
      .poll(
        async () => {
          await page.reload();
          return page.getByTestId("schedule-jobs").locator("tbody tr").count();
        },
        { timeout: 20_000, interval: 1000 },
      )
      .toBeGreaterThanOrEqual(2);
    await expectAccessible(page, "schedule detail");

    await page.goto(`${t.stack.gatewayUrl}/#/schedules`);
    const ticked = (
      await api.call<{ jobs: Array<{ agent: { name: string } | null }> }>("GET", `/v1/jobs?schedule_id=${id}`)
    ).body.jobs;
    expect(ticked.map((j) => j.agent?.name)).toContain("ticker");
    await page.getByRole("button", { name: "Disable schedule */2 * * * * *" }).click();
    await expect.poll(() => row.locator("td").nth(3).textContent()).toBe("disabled");
    const off = (
      await api.call<{ schedule: { enabled: boolean; next_run_at: string | null } }>("GET", `/v1/schedules/${id}`)
    ).body.schedule;
    expect(off).toMatchObject({ enabled: false, next_run_at: null });
    await page.getByRole("button", { name: "Delete schedule */2 * * * * *" }).click();
    await page.getByText("no schedules").waitFor();
    expect((await api.call("GET", `/v1/schedules/${id}`)).status).toBe(404);
  }, 90_000);

  it("refuses a URL outside the allowlist, shows a new webhook's secret once, shows a delivery's attempts and retries it", async () => {
    const page = await open("/webhooks");
    await page.getByRole("heading", { name: "Webhooks" }).waitFor();
    await page.getByLabel("URL").fill("http://127.0.0.1:1/elsewhere");
    await page.getByRole("button", { name: "Create webhook" }).click();
    await expect
      .poll(() => page.getByTestId("webhook-form").getByRole("alert").textContent())
      .toMatch(/^400 invalid_request: url: /);
    await page.getByLabel("URL").fill(`${HOOKS}console`);
    await page.getByRole("button", { name: "Create webhook" }).click();
    const secret = page.getByTestId("webhook-secret");
    await expect.poll(() => secret.locator("code.mono").textContent()).toMatch(/^whsec_/);
    const row = page.getByTestId("webhooks-table").locator("tr[data-webhook-id]");
    await expect.poll(() => row.count()).toBe(1);
    const id = (await row.getAttribute("data-webhook-id")) as string;
    await expectAccessible(page, "webhooks list");
    await shoot(page, "webhooks-list");
    // The secret is in the create answer only: a reload of the list does not show it.
    await page.reload();
    await page.getByTestId("webhooks-table").waitFor();
    expect(await page.getByTestId("webhook-secret").count()).toBe(0);

    const api = apiClient(t.stack.gatewayUrl, t.stack.apiKey);
    expect((await api.call("POST", "/v1/jobs", userMessage("tell the console"))).status).toBe(202);
    await page.goto(`${t.stack.gatewayUrl}/#/webhooks/${id}`);
    const delivery = page.getByTestId("deliveries-table").locator("tr[data-delivery-id]").first();
    await expect
      .poll(
        async () => {
          await page.getByRole("button", { name: "Refresh" }).click();
          return delivery.getAttribute("data-state");
        },
        { timeout: 20_000, interval: 500 },
      )
      .toBe("delivered");
    expect(await delivery.getByTestId("attempt").allTextContents()).toEqual([
      expect.stringMatching(/ 500 \(HTTP 500\) \d+ ms$/),
      expect.stringMatching(/ 204 {2}\d+ ms$/),
    ]);
    await expectAccessible(page, "webhook deliveries");
    await shoot(page, "webhook-deliveries");
    await delivery.getByRole("button", { name: /^Retry delivery / }).click();
    await expect
      .poll(
        async () => {
          await page.getByRole("button", { name: "Refresh" }).click();
          return delivery.getByTestId("attempt").count();
        },
        { timeout: 20_000, interval: 500 },
      )
      .toBe(3);
    expect(hits.get((await delivery.getAttribute("data-delivery-id")) as string)).toBe(3);

    // The list shows an endpoint's health from its view: healthy, then paused with the reason
    // (the pause written as the hosts' result statement writes it) and drops at the pending cap.
    await page.goto(`${t.stack.gatewayUrl}/#/webhooks`);
    const health = page
      .getByTestId("webhooks-table")
      .locator(`tr[data-webhook-id="${id}"]`)
      .getByTestId("webhook-health");
    await expect.poll(() => health.textContent()).toBe("ok");
    await t.pool.query(
      `UPDATE webhooks SET consecutive_failures = 5, paused_until = now() + interval '10 minutes',
         pause_reason = '5 consecutive failed attempts; last: HTTP 503', dropped_deliveries = 2 WHERE id = $1`,
      [id],
    );
    await page.reload();
    await expect
      .poll(() => health.textContent())
      .toMatch(
        /^paused until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d: 5 consecutive failed attempts; last: HTTP 503 2 dropped$/,
      );
    await expectAccessible(page, "webhooks list with a paused endpoint");
  }, 90_000);
});
