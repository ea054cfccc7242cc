/**
 * Which tenant the web console acts for, in Debian's Chromium against the real stack (no host:
 * nothing runs here). The header always names the signed-in tenant; a link carrying another key
 * (`/#key=…&next=…`, which anyone can send) signs a tab with no session in as before, but a tab
 * already signed in asks in the page before replacing its session, and keeps it unless told
 * otherwise. A tab's session lives in its sessionStorage, so the link is opened in the same tab
 * after leaving the console, as a link followed from another site would be.
 */
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { drizzle } from "drizzle-orm/node-postgres";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant } from "../../src/db/tenants-repo";
import { apiClient } from "../helpers/api";
import { expectAccessible } from "../helpers/axe";
import { type BrowserHandle, CHROMIUM, SCREENSHOTS, startBrowser } from "../helpers/browser";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) &&
  (await requireBinary(CHROMIUM, "apt-get install chromium"));

describe.runIf(canRun)("web console: the signed-in tenant", () => {
  const t = useStack({ hosts: 0 });
  let chrome: BrowserHandle;
  let mine: string;
  let otherKey: string;

  beforeAll(async () => {
    chrome = await startBrowser();
    const db = drizzle(t.pool, { schema });
    await createTenant(db, "mallory", "Mallory");
    otherKey = (await createApiKey(db, "mallory")).key;
    // The stack's key's tenant, as the API reports it.
    const minted = await apiClient(t.stack.gatewayUrl, t.stack.apiKey).call<{ tenant_id: string }>(
      "POST",
      "/v1/tokens",
      {},
    );
    mine = minted.body.tenant_id;
    expect(mine).not.toBe("mallory");
  }, 60_000);
  afterAll(async () => {
    await chrome?.close();
  });

  const link = (key: string, next: string) => `${t.stack.gatewayUrl}/#key=${encodeURIComponent(key)}&next=${next}`;
  const tenantShown = (page: Page) => page.getByTestId("tenant").locator("strong").textContent();
  /** The tenant of the token this tab holds: what its requests act as. */
  const sessionTenant = (page: Page) =>
    page.evaluate(() => JSON.parse(sessionStorage.getItem("ear.console.token") ?? "null")?.tenantId ?? null);
  async function shoot(page: Page, name: string) {
    if (!SCREENSHOTS) return;
    await mkdir(SCREENSHOTS, { recursive: true });
    await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`) });
  }

  it("shows the tenant; a link with another key asks before replacing a signed-in session, and keeps it unless told", async () => {
    const page = await chrome.browser.contexts()[0]!.newPage();
    await page.setViewportSize({ width: 1100, height: 700 });
    page.on("pageerror", (e) => console.error(`page error: ${e.message}`));

    // No session yet: the link signs in at once, as before, and the header says as whom.
    await page.goto(link(t.stack.apiKey, "/jobs"));
    await expect.poll(() => tenantShown(page), { timeout: 20_000 }).toBe(mine);
    expect(new URL(page.url()).hash).toBe("#/jobs");
    expect(await page.getByTestId("replace-session").count()).toBe(0);

    // Signed in: another tenant's link asks first. The key leaves the address bar at once and
    // the link's route waits for the answer; the session and its header are unchanged meanwhile.
    await page.goto("about:blank");
    await page.goto(link(otherKey, "/chat/c-from-a-link"));
    const dialog = page.getByRole("dialog", { name: "Sign in with another key?" });
    await expect.poll(() => dialog.isVisible(), { timeout: 20_000 }).toBe(true);
    expect(await dialog.textContent()).toContain(`signed in as tenant ${mine}`);
    expect(new URL(page.url()).hash).toBe("#/chat");
    expect(page.url()).not.toContain(otherKey);
    expect(await tenantShown(page)).toBe(mine);
    expect(await sessionTenant(page)).toBe(mine);
    // The safe answer has the focus.
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe(`Keep ${mine}`);
    await expectAccessible(page, "the replace-session question");
    await shoot(page, "console-replace-session");

    // Keep: nothing changed.
    await dialog.getByRole("button", { name: `Keep ${mine}` }).click();
    await expect.poll(() => dialog.count()).toBe(0);
    expect(await tenantShown(page)).toBe(mine);
    expect(await sessionTenant(page)).toBe(mine);

    // Escape is the same answer as Keep.
    await page.goto("about:blank");
    await page.goto(link(otherKey, "/chat/c-from-a-link"));
    await expect.poll(() => dialog.isVisible(), { timeout: 20_000 }).toBe(true);
    await page.keyboard.press("Escape");
    await expect.poll(() => dialog.count()).toBe(0);
    expect(await sessionTenant(page)).toBe(mine);

    // A wrong key in a link, accepted: refused, and the session stays.
    await page.goto("about:blank");
    await page.goto(link("ear_not-a-real-key", "/jobs"));
    await expect.poll(() => dialog.isVisible(), { timeout: 20_000 }).toBe(true);
    await dialog.getByRole("button", { name: "Sign in with the link's key" }).click();
    await expect
      .poll(() => dialog.getByRole("alert").textContent(), { timeout: 20_000 })
      .toContain(`still signed in as ${mine}`);
    expect(await sessionTenant(page)).toBe(mine);
    await dialog.getByRole("button", { name: `Keep ${mine}` }).click();

    // Accepting a good key replaces the session and goes to the link's route.
    await page.goto("about:blank");
    await page.goto(link(otherKey, "/chat/c-from-a-link"));
    await expect.poll(() => dialog.isVisible(), { timeout: 20_000 }).toBe(true);
    await dialog.getByRole("button", { name: "Sign in with the link's key" }).click();
    await expect.poll(() => tenantShown(page), { timeout: 20_000 }).toBe("mallory");
    expect(await sessionTenant(page)).toBe("mallory");
    expect(new URL(page.url()).hash).toBe("#/chat/c-from-a-link");
    expect(await dialog.count()).toBe(0);
    await expectAccessible(page, "the console signed in as another tenant");
    await page.close();
  });
});
