/**
 * The web console in Debian's Chromium against the real stack (Postgres, Redis, workerd serving
 * the built console, a sandbox-host, the mock model): what a user sees is checked against what the
 * API says. The mock model's `!mock {"tokens": n, "tokens_per_s": r}` scripts make an answer
 * stream for a known time with a known text ("t1 t2 … tn"), so "mid-answer" is a real moment.
 *
 * CONSOLE_SCREENSHOTS=<dir> also saves PNGs of the chat, the debug panel, the inspector, the jobs
 * list and a narrow screen there (for reviewing the UI; nothing is compared against them).
 */
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobView } from "../../src/contracts/job";
import { apiClient, userMessage } from "../helpers/api";
import { expectAccessible } from "../helpers/axe";
import { type BrowserHandle, CHROMIUM, startBrowser } from "../helpers/browser";
import { startCutProxy } from "../helpers/cut-proxy";
import { requireDocker } from "../helpers/docker";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) &&
  (await requireBinary(CHROMIUM, "apt-get install chromium"));
/** Tool calls run in Docker sandboxes; without an engine only that test is skipped (never under CI). */
const docker = canRun ? await requireDocker() : null;
const SHOTS = process.env.CONSOLE_SCREENSHOTS;
const FACTS = ["created_at", "started_at", "prepared_at", "first_output_at", "finished_at"] as const;

/** The mock model's text for `{"tokens": n}`: "t1 t2 … tn". */
const tokensText = (n: number) => Array.from({ length: n }, (_, i) => `t${i + 1}`).join(" ");
const slow = (tokens: number, perS: number) => `!mock ${JSON.stringify({ tokens, tokens_per_s: perS })}`;

let conversationSeq = 0;
const newConversation = () => `c-browser-${process.pid}-${++conversationSeq}`;

describe.runIf(canRun)("web console in Chromium", () => {
  const t = useStack({ hosts: 1 });
  let chrome: BrowserHandle;
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const job = async (id: string) => (await api().call<{ job: JobView }>("GET", `/v1/jobs/${id}`)).body.job;

  beforeAll(async () => {
    chrome = await startBrowser();
    if (SHOTS) await mkdir(SHOTS, { recursive: true });
  }, 60_000);
  afterAll(async () => {
    await chrome?.close();
  });

  async function open(path: string, width = 1100, origin = t.stack.gatewayUrl): Promise<Page> {
    const page = await chrome.browser.contexts()[0]!.newPage();
    await page.setViewportSize({ width, height: 900 });
    page.on("pageerror", (e) => console.error(`page error: ${e.message}`));
    await page.goto(`${origin}/#key=${encodeURIComponent(t.stack.apiKey)}&next=${path}`);
    return page;
  }

  async function openChat(conversation: string, width?: number, origin?: string): Promise<Page> {
    const page = await open(`/chat/${conversation}`, width, origin);
    await expect.poll(() => page.getByTestId("socket-status").textContent(), { timeout: 20_000 }).toBe("connected");
    return page;
  }

  async function send(page: Page, text: string): Promise<string> {
    const before = await page.locator("li.turn").count();
    await page.getByRole("textbox", { name: "Message" }).fill(text);
    await page.getByRole("textbox", { name: "Message" }).press("Enter");
    const turn = page.locator("li.turn").nth(before);
    await expect.poll(() => turn.getAttribute("data-job-id"), { timeout: 20_000 }).toMatch(/^[0-9a-f-]{36}$/);
    return (await turn.getAttribute("data-job-id")) as string;
  }

  const answerOf = (page: Page, jobId: string) => page.locator(`li.turn[data-job-id="${jobId}"]`);
  const textOf = async (page: Page, jobId: string) =>
    (await answerOf(page, jobId).getByTestId("answer-text").textContent()) ?? "";

  /** Polls an answer until its latency footer shows; returns every distinct text seen on the way. */
  async function watch(page: Page, jobId: string, timeoutMs = 30_000): Promise<string[]> {
    const seen: string[] = [];
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const text = await textOf(page, jobId);
      if (seen.at(-1) !== text) seen.push(text);
      if (await answerOf(page, jobId).getByTestId("total-latency").count()) {
        seen.push(await textOf(page, jobId));
        return seen;
      }
      if (Date.now() > deadline)
        throw new Error(`no latency footer after ${timeoutMs} ms; texts seen: ${seen.join(" | ")}`);
      await page.waitForTimeout(40);
    }
  }

  async function shoot(page: Page, name: string, opts: { fullPage?: boolean } = {}) {
    if (SHOTS) await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: opts.fullPage ?? false });
  }

  it("streams an answer in, and its latency footer is the API's total_latency_ms", async () => {
    const page = await openChat(newConversation());
    const jobId = await send(page, slow(30, 15));
    const seen = await watch(page, jobId);
    const expected = tokensText(30);
    expect(seen.at(-1)).toBe(expected);
    // Streamed: several partial texts, each a strict prefix of the answer, were on screen first.
    const partial = seen.filter((s) => s.length > 0 && s !== expected);
    expect(partial.length).toBeGreaterThanOrEqual(3);
    for (const p of partial) expect(expected.startsWith(p)).toBe(true);

    const view = await job(jobId);
    expect(view.state).toBe("completed");
    expect(view.output).toBe(expected);
    expect(view.latency.total_latency_ms).not.toBeNull();
    const footer = answerOf(page, jobId).getByTestId("total-latency");
    expect(await footer.getAttribute("data-ms")).toBe(String(view.latency.total_latency_ms));
    expect(await footer.textContent()).toBe(`total ${view.latency.total_latency_ms} ms`);
    await shoot(page, "chat-latency");
    await page.close();
  });

  it("shows the job's state in the footer's badge while the answer streams (running, as the API says)", async () => {
    const page = await openChat(newConversation());
    const jobId = await send(page, slow(40, 10));
    const expected = tokensText(40);
    // Mid-answer: some text is on screen, not all of it.
    await expect.poll(() => textOf(page, jobId), { timeout: 20_000 }).toMatch(/^t1/);
    expect((await job(jobId)).state).toBe("running");
    const badge = answerOf(page, jobId).locator(".answer-foot .state");
    await expect.poll(() => badge.textContent(), { timeout: 2_000 }).toBe("running");
    expect(await textOf(page, jobId)).not.toBe(expected);
    await shoot(page, "chat-running-badge");
    await watch(page, jobId);
    expect((await job(jobId)).state).toBe("completed");
    // A completed answer has no badge (its footer shows the latency instead).
    expect(await badge.count()).toBe(0);
    await page.close();
  });

  it("shows the five timing facts, execution id, epoch and the event timeline in the debug panel", async () => {
    const page = await openChat(newConversation());
    const jobId = await send(page, slow(12, 40));
    await watch(page, jobId);
    await answerOf(page, jobId).getByRole("button", { name: "Debug" }).click();
    const panel = answerOf(page, jobId).getByTestId("debug-panel");
    await panel.waitFor();

    const view = await job(jobId);
    for (const fact of FACTS) {
      expect(view[fact], fact).not.toBeNull();
      expect(await panel.locator(`[data-fact="${fact}"] td`).textContent(), fact).toBe(view[fact]);
    }
    expect(await panel.locator('[data-latency="total_latency_ms"] td').textContent()).toBe(
      `${view.latency.total_latency_ms} ms`,
    );
    expect(await panel.getByTestId("execution-id").textContent()).toBe(view.execution_id);
    expect(await panel.getByTestId("epoch").textContent()).toBe(String(view.epoch));
    expect(await panel.getByTestId("trace-id").textContent()).toBe(view.trace_id);

    // The timeline is the job's log as the SSE stream serves it: same offsets, types and seqs.
    const log = await api().events(jobId);
    const rows = panel.getByTestId("timeline").locator("tbody tr");
    await expect.poll(() => rows.count()).toBe(log.length);
    for (let i = 0; i < log.length; i++) {
      const cells = await rows.nth(i).locator("td").allTextContents();
      const env = JSON.parse(log[i]!.data) as { seq: number; type: string };
      expect(cells.slice(0, 3)).toEqual([log[i]!.id, String(env.seq), env.type]);
    }
    if (SHOTS) {
      // Tall enough to hold the whole conversation, so the sticky header and composer cover nothing.
      await page.setViewportSize({ width: 1100, height: 1250 });
      await shoot(page, "debug-panel");
    }
    await page.close();
  });

  it("resumes after a reload mid-answer with no duplicated or missing text", async () => {
    const conversation = newConversation();
    const page = await openChat(conversation);
    const jobId = await send(page, slow(90, 15));
    await expect.poll(() => textOf(page, jobId), { timeout: 20_000 }).toContain("t8 ");
    await page.reload();
    // The session survives the reload (its token is in sessionStorage; the key never is).
    // The reload happened mid-answer: the job had not finished when the page came back.
    expect((await job(jobId)).finished_at).toBeNull();
    await expect.poll(() => page.getByTestId("socket-status").textContent(), { timeout: 20_000 }).toBe("connected");
    const seen = await watch(page, jobId);
    const expected = tokensText(90);
    expect(seen.at(-1)).toBe(expected);
    // It came back mid-answer (a partial text before the whole) and every text was a prefix.
    expect(seen.some((s) => s.length > 0 && s !== expected)).toBe(true);
    for (const s of seen) expect(expected.startsWith(s), `"${s}" is not a prefix of the answer`).toBe(true);
    expect((await job(jobId)).output).toBe(expected);
    await page.close();
  });

  it("reconnects after the network drops mid-answer, resuming with no duplicated or missing text", async () => {
    const proxy = await startCutProxy(Number(new URL(t.stack.gatewayUrl).port));
    try {
      const page = await openChat(newConversation(), undefined, proxy.url);
      const jobId = await send(page, slow(60, 15));
      await expect.poll(() => textOf(page, jobId), { timeout: 20_000 }).toContain("t8 ");
      expect(proxy.cutAll()).toBeGreaterThan(0);
      const afterCut = await textOf(page, jobId);
      await expect
        .poll(() => page.getByTestId("socket-status").textContent(), { timeout: 10_000 })
        .not.toBe("connected");
      const seen = await watch(page, jobId);
      const expected = tokensText(60);
      expect(afterCut.length).toBeLessThan(expected.length);
      expect(seen.at(-1)).toBe(expected);
      for (const s of seen) expect(expected.startsWith(s), `"${s}" is not a prefix of the answer`).toBe(true);
      await page.close();
    } finally {
      await proxy.close();
    }
  });

  it("signs in with a pasted key exchanged for a token: the key is in no URL, header after sign-in, or storage", async () => {
    const page = await chrome.browser.contexts()[0]!.newPage();
    const urls: string[] = [];
    const authHeaders: string[] = [];
    page.on("request", (r) => {
      urls.push(r.url());
      const auth = r.headers().authorization;
      if (auth && !r.url().endsWith("/v1/tokens")) authHeaders.push(auth);
    });
    page.on("websocket", (ws) => urls.push(ws.url()));
    await page.goto(`${t.stack.gatewayUrl}/`);
    await page.getByLabel("API key").fill(`ear_00000000_${"0".repeat(64)}`);
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => page.getByRole("alert").textContent()).toContain("Not signed in");
    await page.getByLabel("API key").fill(t.stack.apiKey);
    await page.getByLabel("API key").press("Enter"); // by keyboard
    await page.getByRole("link", { name: "New conversation" }).press("Enter");
    await expect.poll(() => page.getByTestId("socket-status").textContent(), { timeout: 20_000 }).toBe("connected");
    const jobId = await send(page, "hello from a signed-in tab");
    await watch(page, jobId);

    expect(urls.some((u) => u.includes("access_token="))).toBe(true); // the chat socket's token
    expect(urls.filter((u) => u.includes(t.stack.apiKey))).toEqual([]);
    expect(authHeaders.length).toBeGreaterThan(0);
    for (const h of authHeaders) expect(h).toMatch(/^Bearer [\w-]+\.[\w-]+\.[\w-]+$/);
    const stored = await page.evaluate(() => JSON.stringify({ ...sessionStorage, ...localStorage }));
    expect(stored).not.toContain(t.stack.apiKey);
    expect(stored).toContain("ear.console.token");
    await page.close();
  });

  it("applies the busy-conversation policy chosen per message: reject is refused, queue waits its turn", async () => {
    const page = await openChat(newConversation());
    const first = await send(page, slow(40, 15));
    await expect.poll(() => textOf(page, first), { timeout: 20_000 }).toContain("t2 ");
    const policy = page.getByRole("combobox", { name: "If busy" });
    const message = page.getByRole("textbox", { name: "Message" });

    await policy.selectOption("reject");
    await message.fill("refused while busy");
    await message.press("Enter");
    const refused = page.locator("li.turn").nth(1);
    await expect
      .poll(() => refused.getByRole("alert").textContent(), { timeout: 20_000 })
      .toContain("conversation_busy");
    expect(await refused.getAttribute("data-job-id")).toBe("");

    await policy.selectOption("queue");
    await message.fill('!mock {"reply": "second answer"}');
    await message.press("Enter");
    const queued = page.locator("li.turn").nth(2);
    await expect.poll(() => queued.textContent(), { timeout: 20_000 }).toContain("queued, position 1");
    // It becomes a job only once the first has finished, and then answers.
    await expect.poll(() => queued.getAttribute("data-job-id"), { timeout: 30_000 }).toMatch(/^[0-9a-f-]{36}$/);
    const second = (await queued.getAttribute("data-job-id")) as string;
    const [a, b] = [await job(first), await job(second)];
    expect(a.state).toBe("completed");
    expect(Date.parse(b.created_at)).toBeGreaterThanOrEqual(Date.parse(a.finished_at as string));
    await watch(page, second);
    expect(await textOf(page, second)).toBe("second answer");
    await page.close();
  });

  it("with the interrupt policy a message cancels the running answer and is answered at once", async () => {
    const page = await openChat(newConversation());
    const first = await send(page, slow(300, 10));
    await expect.poll(() => textOf(page, first), { timeout: 20_000 }).toContain("t2 ");
    await page.getByRole("combobox", { name: "If busy" }).selectOption("interrupt");
    const second = await send(page, '!mock {"reply": "right away"}');
    await expect
      .poll(() => answerOf(page, first).getByTestId("answer").getAttribute("data-state"), { timeout: 20_000 })
      .toBe("cancelled");
    await watch(page, second);
    expect(await textOf(page, second)).toBe("right away");
    expect((await job(first)).state).toBe("cancelled");
    await page.close();
  });

  it("cancels a running answer from the console", async () => {
    const page = await openChat(newConversation());
    const jobId = await send(page, slow(300, 10));
    await expect.poll(() => textOf(page, jobId), { timeout: 20_000 }).toContain("t3 ");
    await answerOf(page, jobId).getByRole("button", { name: "Cancel" }).press("Enter"); // by keyboard
    await expect
      .poll(() => answerOf(page, jobId).getByTestId("answer").getAttribute("data-state"), { timeout: 20_000 })
      .toBe("cancelled");
    const view = await job(jobId);
    expect(view.state).toBe("cancelled");
    expect(view.finished_at).not.toBeNull();
    // It stopped: far from the 300 tokens the script would have produced (30 s).
    expect((await textOf(page, jobId)).length).toBeLessThan(tokensText(300).length / 2);
    expect(await answerOf(page, jobId).getByRole("button", { name: "Cancel" }).count()).toBe(0);
    await page.close();
  });

  it("shows the same stream in two tabs of one conversation", async () => {
    const conversation = newConversation();
    const a = await openChat(conversation);
    const b = await openChat(conversation);
    const jobId = await send(a, slow(30, 15));
    await expect.poll(() => b.locator(`li.turn[data-job-id="${jobId}"]`).count(), { timeout: 20_000 }).toBe(1);
    const [seenA, seenB] = await Promise.all([watch(a, jobId), watch(b, jobId)]);
    const expected = tokensText(30);
    expect(seenA.at(-1)).toBe(expected);
    expect(seenB.at(-1)).toBe(expected);
    // The second tab streamed too (it did not just load the finished answer).
    expect(seenB.filter((s) => s.length > 0 && s !== expected).length).toBeGreaterThanOrEqual(2);
    for (const s of seenB) expect(expected.startsWith(s)).toBe(true);
    // It shows the message the first tab sent, and the same latency.
    await expect.poll(() => b.locator(`li.turn[data-job-id="${jobId}"] .user`).textContent()).toBe(slow(30, 15));
    const ms = (p: Page) => answerOf(p, jobId).getByTestId("total-latency").getAttribute("data-ms");
    expect(await ms(b)).toBe(await ms(a));
    await a.close();
    await b.close();
  });

  it("lists jobs by state with cursor paging, and the inspector replays a job's events", async () => {
    const submitted: string[] = [];
    for (let i = 0; i < 22; i++) {
      const r = await api().call<{ job: JobView }>("POST", "/v1/jobs", userMessage(`page test ${i}`));
      expect(r.status).toBe(202);
      submitted.push(r.body.job.id);
    }
    await expect
      .poll(async () => (await Promise.all(submitted.map(job))).every((j) => j.state === "completed"), {
        timeout: 60_000,
      })
      .toBe(true);
    const page = await open("/jobs");
    const table = page.getByTestId("jobs-table");
    const ids = async () =>
      table.locator("tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-job-id")));
    await table.waitFor();
    const first = await ids();
    expect(first).toHaveLength(20);
    const apiFirst = await api().call<{ jobs: JobView[] }>("GET", "/v1/jobs?limit=20");
    expect(first).toEqual(apiFirst.body.jobs.map((j) => j.id));
    await shoot(page, "jobs");
    await page.getByRole("button", { name: "Older" }).click();
    // One read per poll: the table is gone while the next page loads, and two reads could see the
    // old first page and then that empty gap (an empty list's [0] is never first[0]).
    await expect
      .poll(async () => {
        const now = await ids();
        return now.length > 0 && now[0] !== first[0];
      })
      .toBe(true);
    const second = await ids();
    expect(second.length).toBeGreaterThan(0);
    expect(second.filter((id) => first.includes(id))).toEqual([]);
    await page.getByRole("button", { name: "Newer" }).click();
    await expect.poll(ids).toEqual(first);

    // The state filter: a cancelled job among completed ones, and the page lists only it (and any other cancelled).
    const doomed = await api().call<{ job: JobView }>("POST", "/v1/jobs", userMessage(slow(300, 10)));
    await api().call("POST", `/v1/jobs/${doomed.body.job.id}/cancel`);
    await expect.poll(async () => (await job(doomed.body.job.id)).state, { timeout: 20_000 }).toBe("cancelled");
    const apiCancelled = await api().call<{ jobs: JobView[] }>("GET", "/v1/jobs?state=cancelled&limit=20");
    expect(apiCancelled.body.jobs.map((j) => j.id)).toContain(doomed.body.job.id);
    await page.getByTestId("state-filter").selectOption("cancelled");
    await expect.poll(ids).toEqual(apiCancelled.body.jobs.map((j) => j.id));

    // The inspector: the job's whole log, its answer rebuilt from it, and a replay to any event.
    const target = submitted[0] as string;
    await page.goto(`${t.stack.gatewayUrl}/#/jobs/${target}`);
    const log = await api().events(target);
    await expect.poll(() => page.getByTestId("timeline").locator("tbody tr").count()).toBe(log.length);
    expect(await page.getByTestId("inspector-state").textContent()).toBe("completed");
    expect(await page.getByTestId("inspector-answer").locator(".answer-text").textContent()).toBe(
      (await job(target)).output,
    );
    await page.getByLabel("Replay to event").fill("2");
    expect(await page.getByTestId("replay-position").textContent()).toBe(`2 / ${log.length}`);
    expect(await page.getByTestId("timeline").locator("tbody tr").count()).toBe(2);
    await page.getByLabel("Replay to event").fill(String(log.length));
    await shoot(page, "inspector", { fullPage: true });
    await page.close();
  });

  it("shows a delayed job's run_at and priority in the jobs list, and an expired job under its state", async () => {
    const later = await api().call<{ job: JobView }>("POST", "/v1/jobs", {
      ...userMessage("admission later"),
      delay_s: 3600,
      priority: 5,
    });
    expect(later.status).toBe(202);
    const doomed = await api().call<{ job: JobView }>("POST", "/v1/jobs", {
      ...userMessage("admission doomed"),
      delay_s: 3600,
      ttl_s: 1,
    });
    expect(doomed.status).toBe(202);
    // Overdue now, without an hour's wait: the host's expiry sweep ends it expired.
    await t.pool.query("UPDATE jobs SET expires_at = now() - interval '1 second' WHERE id = $1", [doomed.body.job.id]);
    await expect.poll(async () => (await job(doomed.body.job.id)).state, { timeout: 20_000 }).toBe("expired");
    const page = await open("/jobs");
    const row = page.locator(`tr[data-job-id="${later.body.job.id}"]`);
    await row.waitFor();
    expect(await row.getByTestId("run-at").locator("time").getAttribute("datetime")).toBe(later.body.job.run_at);
    expect((await row.getByTestId("priority").textContent())?.trim()).toBe("priority 5");
    await page.getByTestId("state-filter").selectOption("expired");
    const expiredRow = page.locator(`tr[data-job-id="${doomed.body.job.id}"]`);
    await expiredRow.waitFor();
    expect(await expiredRow.locator(".state").textContent()).toBe("expired");
    await page.goto(`${t.stack.gatewayUrl}/#/jobs/${later.body.job.id}`);
    await expect
      .poll(async () => page.getByTestId("admission").textContent())
      .toBe(`priority 5, run_at ${later.body.job.run_at}`);
    await page.close();
    await api().call("POST", `/v1/jobs/${later.body.job.id}/cancel`);
  });

  it.runIf(docker !== null)("the inspector shows a tool call collapsed, with its arguments and output", async () => {
    const script = {
      tool_calls: [{ name: "shell", args: { command: "echo hello-from-the-sandbox" } }],
      reply: "The sandbox said hello.",
    };
    const submitted = await api().call<{ job: JobView }>("POST", "/v1/jobs", {
      ...userMessage(`!mock ${JSON.stringify(script)}`),
      tools: ["shell"],
    });
    const jobId = submitted.body.job.id;
    await expect.poll(async () => (await job(jobId)).state, { timeout: 60_000 }).toBe("completed");
    const log = await api().events(jobId);
    const page = await open(`/jobs/${jobId}`);
    await expect.poll(() => page.getByTestId("timeline").locator("tbody tr").count()).toBe(log.length);

    const tool = page.getByTestId("inspector-answer").getByTestId("tool-call");
    expect(await tool.count()).toBe(1);
    expect(await tool.getAttribute("open")).toBeNull(); // collapsed
    expect(await tool.locator("summary").textContent()).toBe("sandbox tool shell ok");
    const stdout = tool.getByTestId("tool-output").locator('[data-key="stdout"] pre');
    expect(await stdout.isVisible()).toBe(false);
    await tool.locator("summary").press("Enter"); // the keyboard opens it
    await expect.poll(() => stdout.isVisible()).toBe(true);
    expect(await tool.getByTestId("tool-args").locator('[data-key="command"] pre').textContent()).toBe(
      "echo hello-from-the-sandbox",
    );
    expect(await stdout.textContent()).toBe("hello-from-the-sandbox\n");
    expect(await tool.getByTestId("tool-output").locator('[data-key="exit_code"] code').textContent()).toBe("0");
    expect(await page.getByTestId("inspector-answer").locator(".text").last().textContent()).toBe(script.reply);
    const sandbox = await page.getByTestId("sandbox-events").locator("li").allTextContents();
    expect(sandbox.map((l) => l.split(" ")[2])).toEqual(["tool.call", "sandbox.created", "tool.result"]);
    expect(sandbox[0]).toContain("tool.call sandbox tool shell");
    await shoot(page, "inspector-tools", { fullPage: true });
    await page.close();
  });

  it("has no serious or critical accessibility violations (axe-core) and no sideways scrolling, wide and narrow", async () => {
    const scan = expectAccessible;
    for (const width of [1100, 380]) {
      const signIn = await chrome.browser.contexts()[0]!.newPage();
      await signIn.setViewportSize({ width, height: 800 });
      await signIn.goto(`${t.stack.gatewayUrl}/`);
      await signIn.getByLabel("API key").waitFor();
      await scan(signIn, `sign-in at ${width}px`);
      await signIn.close();

      const chat = await openChat(newConversation(), width);
      const jobId = await send(chat, slow(6, 50));
      await watch(chat, jobId);
      await answerOf(chat, jobId).getByRole("button", { name: "Debug" }).click();
      await answerOf(chat, jobId).getByTestId("debug-panel").waitFor();
      await scan(chat, `chat with the debug panel at ${width}px`);
      if (width < 500) await shoot(chat, "narrow-chat");

      await chat.goto(`${t.stack.gatewayUrl}/#/jobs`);
      await chat.getByTestId("jobs-table").waitFor();
      await scan(chat, `jobs at ${width}px`);
      await chat.goto(`${t.stack.gatewayUrl}/#/jobs/${jobId}`);
      await expect.poll(() => chat.getByTestId("timeline").locator("tbody tr").count()).toBeGreaterThan(3);
      await scan(chat, `inspector at ${width}px`);
      await chat.close();
    }
  });
});
