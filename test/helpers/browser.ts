/**
 * Debian's Chromium driven by playwright-core over CDP. We start the browser ourselves, with
 * exactly these flags and a fresh profile, rather than letting Playwright launch it: Playwright's
 * launch adds its own flag set tuned to the browsers it downloads, and we test with the one the
 * machine has (`.ci/run` installs it from apt). CHROMIUM overrides the binary.
 */
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { type Browser, chromium, type Page } from "playwright-core";
import type { JobView } from "../../src/contracts/job";
import { killOnExit, stopProcessGroup } from "../../tools/stack/services/process";
import { apiClient } from "./api";

export const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";

const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export interface BrowserHandle {
  browser: Browser;
  close(): Promise<void>;
}

export async function startBrowser(): Promise<BrowserHandle> {
  const profile = await mkdtemp(join(tmpdir(), "ear-chromium-"));
  const child = spawn(CHROMIUM, [...FLAGS, `--user-data-dir=${profile}`, "--remote-debugging-port=0", "about:blank"], {
    detached: true,
    stdio: ["ignore", "ignore", "pipe"],
  });
  killOnExit(child, { group: true });
  const tail: string[] = [];
  const wsUrl = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`chromium did not start in 30 s:\n${tail.join("\n")}`)), 30_000);
    createInterface({ input: child.stderr as NodeJS.ReadableStream }).on("line", (line) => {
      tail.push(line);
      if (tail.length > 20) tail.shift();
      const m = /DevTools listening on (ws:\/\/\S+)/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1] as string);
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`chromium exited (${code}) before listening:\n${tail.join("\n")}`));
    });
  });
  const browser = await chromium.connectOverCDP(wsUrl);
  return {
    browser,
    close: async () => {
      await browser.close().catch(() => {});
      await stopProcessGroup(child, 5000);
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/** Where CONSOLE_SCREENSHOTS asks the console tests to save their screenshots (unset: none). */
export const SCREENSHOTS = process.env.CONSOLE_SCREENSHOTS;

/**
 * The console as a signed-in user sees it: `open` a route in a new page of `browser()` signed in
 * with the key through the URL fragment (never a request), page errors printed; `shoot` saves a
 * PNG when SCREENSHOTS is set.
 */
export function consolePages(browser: () => BrowserHandle, gatewayUrl: () => string, apiKey: () => string) {
  async function open(path: string, width = 1100): Promise<Page> {
    const context = browser().browser.contexts()[0];
    if (!context) throw new Error("the browser has no context");
    const page = await context.newPage();
    await page.setViewportSize({ width, height: 900 });
    page.on("pageerror", (e) => console.error(`page error: ${e.message}`));
    await page.goto(`${gatewayUrl()}/#key=${encodeURIComponent(apiKey())}&next=${path}`);
    return page;
  }
  async function shoot(page: Page, name: string, fullPage = false) {
    if (!SCREENSHOTS) return;
    await mkdir(SCREENSHOTS, { recursive: true });
    await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage });
  }
  return { open, shoot };
}

/**
 * A console suite's pages and the API of its stack (`useStack`'s handle): `open`, `shoot`, the
 * API client and a job's view, the four every console suite builds the same way.
 */
export function consoleSuite(t: { stack: { gatewayUrl: string; apiKey: string } }, browser: () => BrowserHandle) {
  const pages = consolePages(
    browser,
    () => t.stack.gatewayUrl,
    () => t.stack.apiKey,
  );
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const job = async (id: string) => (await api().call<{ job: JobView }>("GET", `/v1/jobs/${id}`)).body.job;
  return { ...pages, api, job };
}
