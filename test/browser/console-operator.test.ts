/**
 * The console as an operator's window, in Chromium against the real stack (one host, Docker
 * sandboxes, the mock model priced in the registry): the run inspector's waterfall ("Run timeline")
 * against the job's own event log, cost on the jobs list and the inspector as the API has it, the
 * job's input and output at the top, a wait for a person split out of the active time with the
 * resumed execution in its own lane, a new conversation that logs no 404 and is then named by its
 * first message, the usage page's charts and tables against GET /v1/usage, and axe on every page
 * at 1280 px and a phone's 390 px.
 *
 * CONSOLE_SCREENSHOTS=<dir> saves each page at both widths there (docs/console.md shows them).
 */
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { UsageAnswer } from "../../src/contracts/catalog";
import type { JobView } from "../../src/contracts/job";
import { expectAccessible } from "../helpers/axe";
import { type BrowserHandle, CHROMIUM, consoleSuite, startBrowser } from "../helpers/browser";
import { requireDocker } from "../helpers/docker";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) &&
  (await requireBinary(CHROMIUM, "apt-get install chromium"));
const docker = canRun ? await requireDocker() : null;

const MODEL = "mock-model";
const REGISTRY = JSON.stringify({
  default: MODEL,
  models: [{ name: MODEL, pricing: { input_usd_per_mtok: 3, output_usd_per_mtok: 15 } }],
});
const WIDTHS = [1280, 390] as const;
const mock = (script: unknown) => `!mock ${JSON.stringify(script)}`;

describe.runIf(canRun)("web console: the operator's window", () => {
  const t = useStack({ hosts: 1, modelRegistry: REGISTRY });
  let chrome: BrowserHandle;
  const { open, shoot, api, job } = consoleSuite(t, () => chrome);
  const finished = async (id: string) => {
    await expect.poll(async () => (await job(id)).finished_at, { timeout: 60_000 }).not.toBeNull();
    return job(id);
  };
  /** The job's SSE log as the inspector replays it: offset and envelope. */
  const eventsOf = async (id: string) =>
    (await api().events(id)).map((m) => ({ offset: Number(m.id), ...(JSON.parse(m.data) as { type: string }) }));
  const submit = async (body: Record<string, unknown>) => {
    const r = await api().call<{ job: JobView }>("POST", "/v1/jobs", body);
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    return r.body.job.id;
  };
  let toolJob = "";

  beforeAll(async () => {
    chrome = await startBrowser();
  }, 60_000);
  afterAll(async () => {
    await chrome?.close();
  });

  async function inspect(id: string, width = 1280): Promise<Page> {
    const page = await open(`/jobs/${id}`, width);
    const log = await eventsOf(id);
    await expect
      .poll(() => page.getByTestId("timeline").locator("tbody tr").count(), { timeout: 20_000 })
      .toBe(log.length);
    return page;
  }

  it.runIf(docker !== null)(
    "the inspector opens on the job's input, output and cost, then a waterfall of its run drawn from its events",
    async () => {
      const reply = "The sandbox said hello.";
      const input = mock({ tool_calls: [{ name: "shell", args: { command: "echo waterfall" } }], reply });
      toolJob = await submit({
        conversation_id: `c-operator-${process.pid}`,
        input: { messages: [{ role: "user", content: input }] },
        tools: ["shell"],
      });
      const view = await finished(toolJob);
      expect(view.state).toBe("completed");
      expect(view.usage.cost_usd).toBeGreaterThan(0);
      const page = await inspect(toolJob);

      expect(await page.getByTestId("inspector-input").textContent()).toBe(input);
      expect(await page.getByTestId("inspector-output").textContent()).toBe(reply);
      const cost = page.getByTestId("inspector-facts").getByTestId("run-cost");
      expect(Number(await cost.getAttribute("data-usd"))).toBe(view.usage.cost_usd);
      expect(await cost.textContent()).toBe(`cost $${(view.usage.cost_usd as number).toFixed(6)}`);

      const figure = page.getByRole("figure", { name: "Run timeline" });
      await figure.waitFor();
      const lanes = figure.getByTestId("lane");
      expect(await lanes.count()).toBe(1);
      expect(await lanes.first().getAttribute("data-execution")).toBe(view.execution_id);
      expect(await lanes.first().getByTestId("lane-reason").textContent()).toBe("started");
      const rows = figure.getByTestId("bar");
      const kinds = await rows.evaluateAll((els) =>
        els.map(
          (e) =>
            `${e.getAttribute("data-kind")}${e.getAttribute("data-tool") ? `:${e.getAttribute("data-tool")}` : ""}`,
        ),
      );
      expect(kinds).toEqual(["queue", "preparation", "model", "tool:sandbox", "model"]);
      // The queue wait is the API's dispatch latency (created → started), to the millisecond.
      const queue = rows.first().getByRole("button");
      expect(await queue.getAttribute("aria-label")).toBe(`queue wait, ${view.latency.dispatch_latency_ms} ms`);
      expect(await rows.nth(3).locator(".bar-label").textContent()).toBe("sandbox tool shell");
      // Hovering a bar shows the event that opened it; selecting keeps it.
      const log = await eventsOf(toolJob);
      const call = log.find((e) => e.type === "tool.call")!;
      await rows.nth(3).getByRole("button").hover();
      const payload = JSON.parse((await figure.getByTestId("bar-payload").textContent()) as string);
      expect(payload).toMatchObject({ type: "tool.call", offset: call.offset, payload: { name: "shell" } });
      await page.mouse.move(0, 0);
      await expect.poll(() => figure.getByTestId("bar-detail").count()).toBe(0);
      await rows.nth(2).getByRole("button").press("Enter");
      const turn = log.find((e) => e.type === "model.turn")!;
      expect(JSON.parse((await figure.getByTestId("bar-payload").textContent()) as string)).toMatchObject({
        type: "model.turn",
        offset: turn.offset,
      });
      expect(await rows.nth(2).getByRole("button").getAttribute("aria-pressed")).toBe("true");
      // The raw table stays, and the debug panel labels the call by what ran it.
      expect(await page.getByTestId("sandbox-events").locator("li").first().textContent()).toContain(
        "tool.call sandbox tool shell",
      );
      for (const w of WIDTHS) {
        await page.setViewportSize({ width: w, height: 900 });
        await expectAccessible(page, `inspector at ${w}px`);
        await shoot(page, `inspector-waterfall-${w}`, true);
      }

      // The jobs list carries each job's cost, as the API has it.
      await page.goto(`${t.stack.gatewayUrl}/#/jobs`);
      const row = page.locator(`tr[data-job-id="${toolJob}"]`);
      await row.waitFor();
      expect(Number(await row.getByTestId("job-cost").getAttribute("data-usd"))).toBe(view.usage.cost_usd);
      await page.close();
    },
    120_000,
  );

  it("shows the input of a job submitted without a conversation, read from GET /v1/jobs/{id}?include=input", async () => {
    const system = `You answer in one line (${process.pid}).`;
    const question = `What is the input of a job with no conversation? ${process.pid}`;
    const messages = [
      { role: "system", content: system },
      { role: "user", content: question },
    ];
    const id = await submit({ input: { messages } });
    await finished(id);
    // The API: the input only when asked for, and a clear 400 for an include it does not know.
    const plain = await api().call<{ job: JobView }>("GET", `/v1/jobs/${id}`);
    expect(plain.body.job).not.toHaveProperty("input");
    const withInput = await api().call<{ job: JobView }>("GET", `/v1/jobs/${id}?include=input`);
    expect(withInput.status).toBe(200);
    expect(withInput.body.job.input).toEqual({ messages });
    const bad = await api().call<{ error: { code: string; message: string } }>("GET", `/v1/jobs/${id}?include=secrets`);
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe("invalid_request");
    expect(bad.body.error.message).toContain("include");

    // The inspector shows the user's messages of it (the system message is the agent's, not the user's).
    const page = await inspect(id);
    await expect.poll(() => page.getByTestId("inspector-input").textContent(), { timeout: 20_000 }).toBe(question);
    await page.close();
  });

  it("splits a wait for a person out of the active time, and draws the resumed execution as its own lane", async () => {
    const agent = `asker-${process.pid}`;
    const made = await api().call("POST", "/v1/agents", { name: agent, model: MODEL, ask_user: true });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const id = await submit({
      agent,
      input: {
        messages: [
          { role: "user", content: mock({ tool_calls: [{ name: "ask_user", args: { question: "which?" } }] }) },
        ],
      },
    });
    await expect.poll(async () => (await job(id)).state, { timeout: 60_000 }).toBe("waiting");
    await new Promise((r) => setTimeout(r, 1500)); // a wait long enough to see
    expect((await api().call("POST", `/v1/jobs/${id}/input`, { content: "this one" })).status).toBeLessThan(300);
    const view = await finished(id);
    expect(view.state).toBe("completed");
    const log = (await api().events(id)).map(
      (m) => JSON.parse(m.data) as { type: string; payload: { waited_ms?: number } },
    );
    const resumed = log.find((e) => e.type === "run.resumed")!;

    const page = await inspect(id);
    const figure = page.getByRole("figure", { name: "Run timeline" });
    const lanes = figure.getByTestId("lane");
    expect(await lanes.count()).toBe(2);
    expect(await lanes.nth(1).getByTestId("lane-reason").textContent()).toBe("resumed: input by api");
    const wait = lanes.first().locator('[data-kind="wait"]');
    expect(await wait.locator(".bar-label").textContent()).toBe("waiting for an answer · input by api");
    const waitMs = Number((await wait.getByRole("button").getAttribute("aria-label"))?.match(/, (\d+) ms/)?.[1]);
    // The person's wait is the API's: from the question to the answer (run.resumed's waited_ms);
    // the time from the answer to the resumed execution's first event is queue, in the new lane.
    expect(waitMs).toBe(resumed.payload.waited_ms);
    expect(waitMs).toBeGreaterThanOrEqual(1000);
    expect(await lanes.nth(1).locator('[data-kind="queue"] .bar-label').textContent()).toBe(
      "queue wait after the decision",
    );
    const summary = await figure.getByTestId("waterfall-summary").textContent();
    const total = Date.parse(view.finished_at as string) - Date.parse(view.created_at);
    expect(summary).toBe(
      `${total} ms from submit; active ${total - waitMs} ms, waiting for a person ${waitMs} ms; 2 executions`,
    );
    await shoot(page, "inspector-wait-1280", true);
    await page.close();
  }, 120_000);

  it("a new conversation asks for no history (no 404 logged) and is then named by its first message", async () => {
    const page = await open("/chat", 1280);
    const notFound: string[] = [];
    page.on("response", (r) => r.status() === 404 && notFound.push(r.url()));
    page.on("console", (m) => m.type() === "error" && notFound.push(m.text()));
    await page.getByRole("link", { name: "New conversation" }).click();
    await expect.poll(() => page.getByTestId("socket-status").textContent(), { timeout: 20_000 }).toBe("connected");
    const conversation = decodeURIComponent(new URL(page.url()).hash.split("/")[2] as string);
    const first = "Summarise the quarterly numbers for the board, please, in three short bullet points";
    await page.getByRole("textbox", { name: "Message" }).fill(first);
    await page.getByRole("textbox", { name: "Message" }).press("Enter");
    await page.getByTestId("total-latency").waitFor({ timeout: 30_000 });
    expect(notFound).toEqual([]);
    await page.reload();
    const link = page.locator(`nav.conversations a[data-conversation="${conversation}"]`);
    await expect.poll(() => link.textContent(), { timeout: 20_000 }).toBe(`${first.slice(0, 47)}…`);
    expect(await link.getAttribute("title")).toBe(conversation);
    await page.close();
  }, 90_000);

  it("#/usage draws jobs per hour, latency, spend against the daily budget and top errors as GET /v1/usage has them, each with its table", async () => {
    const failed = await submit({
      input: {
        messages: [{ role: "user", content: mock({ error: { status: 400, message: "refused by the test" } }) }],
      },
    });
    const f = await finished(failed);
    expect(f.state).toBe("failed");
    await t.pool.query("update tenants set daily_budget_usd = 0.001");
    const day = (ago: number) => new Date(Date.now() - ago * 86_400_000).toISOString().slice(0, 10);
    const u = (await api().call<UsageAnswer>("GET", `/v1/usage?from=${day(6)}&to=${day(0)}`)).body;
    expect(u.daily_budget_usd).toBe(0.001);
    expect(u.errors).toContainEqual({ code: f.error?.code, jobs: 1 });

    const page = await open("/usage", 1280);
    await page.getByRole("img", { name: /^Jobs per hour by state: / }).waitFor({ timeout: 20_000 });
    expect(await page.getByTestId("usage-range").textContent()).toBe(`${day(6)} to ${day(0)}`);
    const cells = (id: string) =>
      page
        .getByTestId(id)
        .locator("tbody tr")
        .evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll("td")].map((c) => c.textContent)));
    expect(await cells("table-jobs")).toEqual(u.jobs_per_hour.map((h) => [h.hour, h.state, String(h.jobs)]));
    const l = u.latency;
    expect(await cells("table-latency")).toEqual(
      (
        [
          ["dispatch", l.dispatch_ms],
          ["first output", l.first_output_ms],
          ["total", l.total_ms],
        ] as const
      ).map(([n, p]) => [n, String(p.jobs), String(p.p50 ?? "–"), String(p.p95 ?? "–"), String(p.p99 ?? "–")]),
    );
    expect(l.total_ms.jobs).toBeGreaterThanOrEqual(4);
    expect(await cells("table-spend")).toEqual(
      u.spend.map((s) => [
        s.day,
        s.agent ?? "default agent",
        s.model,
        String(s.model_calls),
        `$${(s.cost_usd as number).toFixed(6)}`,
      ]),
    );
    expect(u.spend.map((s) => s.agent)).toContain(`asker-${process.pid}`);
    expect(await cells("table-errors")).toEqual(u.errors.map((e) => [e.code, String(e.jobs)]));
    expect(await page.getByTestId("spend-summary").textContent()).toContain("daily budget $0.001000");
    expect(await page.locator(".budget-line").count()).toBe(1);
    await expect
      .poll(() => page.getByRole("img", { name: /^total latency: p50 / }).getAttribute("aria-label"))
      .toBe(`total latency: p50 ${l.total_ms.p50} ms, p95 ${l.total_ms.p95} ms, p99 ${l.total_ms.p99} ms`);
    for (const w of WIDTHS) {
      await page.setViewportSize({ width: w, height: 900 });
      await expectAccessible(page, `usage at ${w}px`);
      await shoot(page, `usage-${w}`, true);
    }
    await page.getByLabel("Range (UTC)").selectOption("1");
    await expect.poll(() => page.getByTestId("usage-range").textContent()).toBe(`${day(0)} to ${day(0)}`);
    await page.close();
  }, 150_000);

  it("has no serious or critical axe violations on any page, at 1280 px and 390 px", async () => {
    const pages = [
      ["chat", "/chat"],
      ["jobs", "/jobs"],
      ["agents", "/agents"],
      ["new-agent", "/agents/_new"],
      ["schedules", "/schedules"],
      ["webhooks", "/webhooks"],
      ["usage", "/usage"],
    ] as const;
    for (const width of WIDTHS) {
      for (const [name, route] of pages) {
        const page = await open(route, width);
        await page.locator("main#main").waitFor();
        await page.waitForLoadState("networkidle");
        await expectAccessible(page, `${name} at ${width}px`);
        // The usage page's shots are its own test's, with a budget and a failed job in them.
        if (name !== "usage") await shoot(page, `${name}-${width}`, true);
        await page.close();
      }
    }
  }, 240_000);
});
