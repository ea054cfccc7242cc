/**
 * The example app (examples/chat: Vite + React + @ai-sdk/react's useChat + EarChatTransport, built
 * with the package's own exports) in Debian's Chromium against the real stack (workerd gateway,
 * Postgres, Redis, a host, the mock model). The page is served from another origin than the
 * gateway's (CORS), by a server that answers its /api/token with examples/chat/token.ts: the page
 * holds a conversation-bound token only, never the key. The mock model's
 * `!mock {"tokens": n, "tokens_per_s": r}` streams "t1 … tn" over a known time, so "mid-answer"
 * is a real moment: a reload there resumes to exactly the job's output, a closed page lets the
 * job finish, and Stop cancels it for good. The page's run panel is useJob and useJobTree
 * (edge-agent-runtime/react) on a job-bound read token from the same server.
 *
 * AI_SDK_SCREENSHOTS=<dir> saves PNGs of the page there.
 */
import { createReadStream } from "node:fs";
import { mkdir, mkdtemp, rm, stat } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { extname, join, resolve } from "node:path";
import type { Page } from "playwright-core";
import { build, createServer as createViteServer, type ViteDevServer } from "vite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serveToken } from "../../examples/chat/vite.config";
import type { JobView } from "../../src/contracts/job";
import { buildPackages } from "../../tools/build/packages";
import { freePort } from "../../tools/stack/services/ports";
import { apiClient } from "../helpers/api";
import { type BrowserHandle, CHROMIUM, startBrowser } from "../helpers/browser";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) &&
  (await requireBinary(CHROMIUM, "apt-get install chromium"));
const SHOTS = process.env.AI_SDK_SCREENSHOTS;
const ROOT = resolve(import.meta.dirname, "../..");

const tokensText = (n: number) => Array.from({ length: n }, (_, i) => `t${i + 1}`).join(" ");
const slow = (tokens: number, perS: number) => `!mock ${JSON.stringify({ tokens, tokens_per_s: perS })}`;
let seq = 0;
const newConversation = () => `c-aisdk-${process.pid}-${++seq}`;

const TYPES: Record<string, string> = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css" };

/** The page's origin: the built example and its /api/token, on a port of its own (so another origin). */
let pageDir = "";
let tokenEnv: { gatewayUrl: string; apiKey: string } | null = null;
const pageServer: Server = createServer((req, res) => {
  const url = new URL(req.url ?? "/", "http://page");
  if (url.pathname === "/api/token") {
    if (!tokenEnv) return void res.writeHead(503).end();
    return void serveToken(req, res, tokenEnv);
  }
  const file = join(pageDir, url.pathname === "/" ? "index.html" : url.pathname);
  if (!file.startsWith(pageDir)) return void res.writeHead(404).end();
  void stat(file).then(
    (s) => {
      if (!s.isFile()) return void res.writeHead(404).end();
      res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" });
      createReadStream(file).pipe(res);
    },
    () => void res.writeHead(404).end(),
  );
});
if (canRun) await new Promise<void>((ok) => pageServer.listen(0, "127.0.0.1", ok));
const pageOrigin = canRun ? `http://127.0.0.1:${(pageServer.address() as AddressInfo).port}` : "";
/** The example's own Vite dev server (`npm run example:chat`): React's StrictMode mounts twice there. */
const devPort = canRun ? await freePort() : 0;
const devOrigin = `http://127.0.0.1:${devPort}`;

describe.runIf(canRun)("useChat with EarChatTransport in Chromium (the example app, another origin)", () => {
  const t = useStack({ hosts: 1, gatewayVars: { CORS_ALLOWED_ORIGINS: `${pageOrigin},${devOrigin}` } });
  let chrome: BrowserHandle;
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const job = async (id: string) => (await api().call<{ job: JobView }>("GET", `/v1/jobs/${id}`)).body.job;
  /** Every request a page made, to check it never carried the API key. */
  const requests: Array<{ url: string; headers: Record<string, string> }> = [];

  beforeAll(async () => {
    pageDir = await mkdtemp(join(tmpdir(), "ear-example-chat-"));
    await buildPackages();
    await build({
      configFile: join(ROOT, "examples/chat/vite.config.ts"),
      logLevel: "error",
      build: { outDir: pageDir, emptyOutDir: true },
    });
    tokenEnv = { gatewayUrl: t.stack.gatewayUrl, apiKey: t.stack.apiKey };
    chrome = await startBrowser();
    if (SHOTS) await mkdir(SHOTS, { recursive: true });
  }, 180_000);
  afterAll(async () => {
    await chrome?.close();
    await new Promise<void>((ok) => pageServer.close(() => ok()));
    if (pageDir) await rm(pageDir, { recursive: true, force: true });
    const leaked = requests.filter((r) => `${r.url} ${JSON.stringify(r.headers)}`.includes(t.stack.apiKey));
    expect(leaked).toEqual([]);
  });

  async function open(conversation: string, origin = pageOrigin): Promise<Page> {
    const page = await chrome.browser.contexts()[0]!.newPage();
    await page.setViewportSize({ width: 900, height: 700 });
    page.on("pageerror", (e) => console.error(`page error: ${e.message}`));
    page.on("request", (r) => void requests.push({ url: r.url(), headers: r.headers() }));
    await page.goto(`${origin}/?c=${encodeURIComponent(conversation)}`);
    await ready(page);
    return page;
  }
  const status = (page: Page) => page.getByTestId("status").textContent();
  const ready = (page: Page) => expect.poll(() => status(page), { timeout: 20_000 }).toBe("ready");
  const answer = (page: Page) => page.locator('li[data-role="assistant"]').last();
  const answerText = async (page: Page) => (await answer(page).getByTestId("answer-text").textContent()) ?? "";

  async function send(page: Page, text: string): Promise<string> {
    await page.getByRole("textbox", { name: "Message" }).fill(text);
    await page.getByRole("textbox", { name: "Message" }).press("Enter");
    await expect.poll(() => answer(page).getAttribute("data-job-id"), { timeout: 20_000 }).toMatch(/^[0-9a-f-]{36}$/);
    return (await answer(page).getAttribute("data-job-id")) as string;
  }

  /** Polls the answer until `done`; returns every distinct text seen on the way. */
  async function watch(page: Page, done: (text: string) => boolean | Promise<boolean>, timeoutMs = 30_000) {
    const seen: string[] = [];
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const text = (await answer(page).count()) > 0 ? await answerText(page) : "";
      if (seen.at(-1) !== text) seen.push(text);
      if (await done(text)) return seen;
      if (Date.now() > deadline) throw new Error(`timed out; texts seen: ${seen.join(" | ")}`);
      await page.waitForTimeout(40);
    }
  }

  async function shoot(page: Page, name: string) {
    if (SHOTS) await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  }

  it("streams the answer in, ending with the job's output and the API's total latency", async () => {
    const page = await open(newConversation());
    expect(new URL(page.url()).origin).not.toBe(new URL(t.stack.gatewayUrl).origin);
    const jobId = await send(page, slow(30, 15));
    const expected = tokensText(30);
    const seen = await watch(page, async () => (await answer(page).getByTestId("total-latency").count()) > 0);
    expect(seen.at(-1)).toBe(expected);
    const partial = seen.filter((s) => s.length > 0 && s !== expected);
    expect(partial.length).toBeGreaterThanOrEqual(3);
    for (const p of partial) expect(expected.startsWith(p)).toBe(true);

    const view = await job(jobId);
    expect(view.state).toBe("completed");
    expect(view.output).toBe(expected);
    expect(await answer(page).getByTestId("total-latency").getAttribute("data-ms")).toBe(
      String(view.latency.total_latency_ms),
    );
    expect(await answer(page).getAttribute("data-state")).toBe("completed");
    await ready(page);
    // The run panel: useJob and useJobTree (edge-agent-runtime/react) with a job-bound read token.
    const events = await api().events(jobId);
    await expect.poll(() => page.getByTestId("run-state").textContent(), { timeout: 15_000 }).toBe("completed");
    await expect.poll(() => page.getByTestId("run-events").textContent()).toBe(String(events.length));
    await expect.poll(() => page.getByTestId("run-latency").textContent()).toBe(String(view.latency.total_latency_ms));
    expect(await page.getByTestId("run-tree").textContent()).toBe("1");
    // The page talked to the gateway cross-origin, with a token.
    const toGateway = requests.filter(
      (r) => r.url.startsWith(t.stack.gatewayUrl.replace(/^http/, "ws")) || r.url.startsWith(t.stack.gatewayUrl),
    );
    expect(toGateway.length).toBeGreaterThan(0);
    await shoot(page, "chat-streamed");
    await page.close();
  });

  it("a reload mid-answer resumes it, and the page ends with exactly the job's output, once", async () => {
    const conversation = newConversation();
    const page = await open(conversation);
    const jobId = await send(page, slow(60, 10));
    await watch(page, (text) => text.split(" ").length >= 8);
    const before = await job(jobId);
    expect(before.state).toBe("running");
    await page.reload();
    const expected = tokensText(60);
    const seen = await watch(page, (text) => text === expected, 40_000);
    // Resumed mid-way: the page showed partial text after the reload, never anything but a prefix.
    expect(seen.some((s) => s.length > 0 && s !== expected)).toBe(true);
    for (const s of seen) expect(expected.startsWith(s)).toBe(true);
    await ready(page);
    const view = await job(jobId);
    expect(view.state).toBe("completed");
    expect(await answerText(page)).toBe(view.output);
    expect(await page.locator('li[data-role="assistant"]').count()).toBe(1);
    expect(await page.locator('li[data-role="user"]').count()).toBe(1);
    await shoot(page, "chat-resumed");
    await page.close();
  });

  it("closing the page mid-answer does not cancel: the job completes", async () => {
    const page = await open(newConversation());
    const jobId = await send(page, slow(40, 10));
    await watch(page, (text) => text.split(" ").length >= 5);
    await page.close();
    const deadline = Date.now() + 30_000;
    let view = await job(jobId);
    while (["queued", "running"].includes(view.state) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      view = await job(jobId);
    }
    expect(view.state).toBe("completed");
    expect(view.output).toBe(tokensText(40));
  });

  it("Stop (useChat's stop()) cancels the job durably", async () => {
    const page = await open(newConversation());
    const jobId = await send(page, slow(100, 10));
    await watch(page, (text) => text.split(" ").length >= 5);
    await page.getByRole("button", { name: "Stop" }).click();
    await ready(page);
    await expect.poll(async () => (await job(jobId)).state, { timeout: 15_000 }).toBe("cancelled");
    const view = await job(jobId);
    const shown = await answerText(page);
    expect(shown.length).toBeGreaterThan(0);
    expect((view.output ?? "").startsWith(shown)).toBe(true);
    expect(view.output).not.toBe(tokensText(100));
    const events = await api().events(jobId);
    expect(events.at(-1)?.event).toBe("run.cancelled");
    await expect.poll(() => page.getByTestId("run-state").textContent(), { timeout: 15_000 }).toBe("cancelled");
    await shoot(page, "chat-stopped");
    await page.close();
  });

  it("on the example's dev server (StrictMode: useChat resumes twice) a reload mid-answer still resumes, and cancels nothing", async () => {
    process.env.EAR_URL = t.stack.gatewayUrl;
    process.env.EAR_API_KEY = t.stack.apiKey;
    let vite: ViteDevServer | null = null;
    try {
      vite = await createViteServer({
        configFile: join(ROOT, "examples/chat/vite.config.ts"),
        logLevel: "error",
        server: { host: "127.0.0.1", port: devPort, strictPort: true, hmr: false },
      });
      await vite.listen();
      const page = await open(newConversation(), devOrigin);
      const jobId = await send(page, slow(50, 10));
      await watch(page, (text) => text.split(" ").length >= 6);
      await page.reload();
      const expected = tokensText(50);
      await watch(page, (text) => text === expected, 40_000);
      await ready(page);
      const view = await job(jobId);
      expect(view.state).toBe("completed");
      expect(await answerText(page)).toBe(view.output);
      expect(await page.locator('li[data-role="assistant"]').count()).toBe(1);
      await page.close();
    } finally {
      await vite?.close();
      delete process.env.EAR_URL;
      delete process.env.EAR_API_KEY;
    }
  });
});
