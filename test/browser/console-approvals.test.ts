import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentView } from "../../src/contracts/agent";
import type { JobView } from "../../src/contracts/job";
import { apiClient } from "../helpers/api";
import { expectAccessible } from "../helpers/axe";
import { type BrowserHandle, CHROMIUM, consolePages, startBrowser } from "../helpers/browser";
import { requireDocker } from "../helpers/docker";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) &&
  (await requireBinary(CHROMIUM, "apt-get install chromium"));
/** An approved `shell` call runs in a Docker sandbox; without an engine only those tests are skipped. */
const docker = canRun ? await requireDocker() : null;

const mock = (script: unknown) => `!mock ${JSON.stringify(script)}`;
const shellCall = (command: string) => mock({ tool_calls: [{ name: "shell", args: { command } }] });

describe.runIf(canRun)("web console: approvals and questions", () => {
  const t = useStack({ hosts: 1 });
  let chrome: BrowserHandle;
  const { open, shoot } = consolePages(
    () => chrome,
    () => t.stack.gatewayUrl,
    () => t.stack.apiKey,
  );
  let seq = 0;
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const job = async (id: string) => (await api().call<{ job: JobView }>("GET", `/v1/jobs/${id}`)).body.job;
  const eventsOf = async (id: string) =>
    (await api().events(id)).map((e) => ({ id: e.id, ...(JSON.parse(e.data) as Record<string, unknown>) })) as Array<{
      id: string;
      type: string;
      execution_id: string;
      epoch: number;
      payload: Record<string, unknown>;
    }>;

  beforeAll(async () => {
    chrome = await startBrowser();
  }, 60_000);
  afterAll(async () => {
    await chrome?.close();
  });

  const defineAgent = async (def: Record<string, unknown>) => {
    const name = `gate-${process.pid}-${++seq}`;
    const r = await api().call("POST", "/v1/agents", { name, model: t.stack.modelName, ...def });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return name;
  };

  /** Opens a new conversation with the agent picked, and sends one message; returns its job id. */
  async function chatWith(agent: string, text: string): Promise<{ page: Page; jobId: string }> {
    const page = await open(`/chat/c-approvals-${process.pid}-${++seq}`);
    await expect.poll(() => page.getByTestId("socket-status").textContent(), { timeout: 20_000 }).toBe("connected");
    await page.locator(`[data-testid="agent-picker"] option[value="${agent}"]`).waitFor({ state: "attached" });
    await page.getByTestId("agent-picker").selectOption(agent);
    await page.getByRole("textbox", { name: "Message" }).fill(text);
    await page.getByRole("textbox", { name: "Message" }).press("Enter");
    const turn = page.locator("li.turn").first();
    await expect.poll(() => turn.getAttribute("data-job-id"), { timeout: 20_000 }).toMatch(/^[0-9a-f-]{36}$/);
    return { page, jobId: (await turn.getAttribute("data-job-id")) as string };
  }

  /** Moves the focus forward with Tab until `target` has it (at most 10 stops). */
  async function tabTo(page: Page, target: ReturnType<Page["locator"]>) {
    for (let i = 0; i < 10; i++) {
      if (await target.evaluate((el) => el === document.activeElement)) return;
      await page.keyboard.press("Tab");
    }
    throw new Error("Tab never reached the control");
  }

  it.runIf(docker !== null)(
    "chat: the approval card shows the call, Approve by keyboard runs the tool once and the answer finishes in the same bubble",
    async () => {
      const agent = await defineAgent({ tools: [{ name: "shell", requires_approval: true }] });
      const { page, jobId } = await chatWith(agent, shellCall("echo ran-$((40+2)) >> /tmp/count; cat /tmp/count"));
      const turn = page.locator(`li.turn[data-job-id="${jobId}"]`);
      const card = turn.getByTestId("approval-card");
      await card.waitFor({ timeout: 30_000 });

      // The card is the job's waiting_for: tool, arguments, deadline.
      const waiting = await job(jobId);
      expect(waiting.state).toBe("waiting");
      const wf = waiting.waiting_for;
      expect(wf).toMatchObject({ kind: "approval", tool: "shell" });
      expect(await card.getAttribute("data-call-id")).toBe(wf?.call_id);
      expect(await card.getByTestId("approval-tool").textContent()).toBe("shell");
      expect(await card.getByTestId("approval-args").locator('[data-key="command"] pre').textContent()).toBe(
        (wf?.arguments as { command: string } | undefined)?.command,
      );
      expect(await card.locator("time").getAttribute("datetime")).toBe(wf?.deadline_at);
      await expect.poll(() => turn.locator(".state-waiting").textContent()).toBe("waiting");
      // A reload while waiting rebuilds the same card from the log.
      await page.reload();
      await expect.poll(() => page.getByTestId("socket-status").textContent(), { timeout: 20_000 }).toBe("connected");
      await card.waitFor({ timeout: 20_000 });
      expect(await card.getAttribute("data-call-id")).toBe(wf?.call_id);
      await shoot(page, "approval-card");
      await expectAccessible(page, "chat with an approval card at 1100px");
      await page.setViewportSize({ width: 380, height: 900 });
      await expectAccessible(page, "chat with an approval card at 380px");
      await shoot(page, "approval-card-narrow");
      await page.setViewportSize({ width: 1100, height: 900 });

      // By keyboard: type a note in the note field, Tab to Approve, Enter.
      await card.getByLabel(/^Note/).focus();
      await page.keyboard.type("fine by me");
      const approve = card.getByRole("button", { name: "Approve" });
      await tabTo(page, approve);
      await page.keyboard.press("Enter");

      await turn.getByTestId("total-latency").waitFor({ timeout: 60_000 });
      expect(await card.count()).toBe(0);
      const done = await job(jobId);
      expect(done.state, JSON.stringify(done)).toBe("completed");
      expect(done.output?.match(/ran-42/g)?.length).toBe(1);
      // The bubble's text is the answer exactly (nothing repeated across the two executions).
      const shown = (await turn.locator(".answer-text .text").allTextContents()).join("");
      expect(shown).toBe(done.output);
      expect(await turn.getByTestId("tool-call").count()).toBe(1);

      const log = await eventsOf(jobId);
      const types = log.map((e) => e.type);
      expect(types.filter((x) => x === "tool.call")).toHaveLength(1);
      expect(types.filter((x) => x === "tool.result")).toHaveLength(1);
      expect(types.filter((x) => x === "run.resumed")).toHaveLength(1);
      const requested = log.find((e) => e.type === "tool.approval_requested");
      const resumed = log.find((e) => e.type === "run.resumed");
      expect(resumed?.payload).toMatchObject({ call_id: wf?.call_id, decision: "approve", by: "api" });
      expect(resumed?.execution_id).not.toBe(requested?.execution_id);

      // The debug panel shows both executions: the one that suspended and the one that resumed.
      await turn.getByRole("button", { name: "Debug" }).click();
      const wait = turn.getByTestId("waits").locator("li");
      await wait.waitFor();
      expect(await wait.getAttribute("data-suspended")).toBe(`${requested?.execution_id}@${requested?.epoch}`);
      expect(await wait.getAttribute("data-resumed")).toBe(`${resumed?.execution_id}@${resumed?.epoch}`);
      expect(resumed?.epoch).toBeGreaterThan(requested?.epoch as number);
      expect(await turn.getByTestId("executions-seen").textContent()).toBe(
        `${requested?.execution_id.slice(0, 8)}@${requested?.epoch}, ${resumed?.execution_id.slice(0, 8)}@${resumed?.epoch}`,
      );
      // Tall enough for the whole turn, so the sticky composer covers none of it.
      await page.setViewportSize({ width: 1100, height: 2000 });
      await shoot(page, "approval-resumed");
      await page.close();
    },
    120_000,
  );

  it.runIf(docker !== null)(
    "jobs and inspector: the waiting filter lists it; Deny with a note from the inspector reaches the model",
    async () => {
      const agent = await defineAgent({ tools: [{ name: "shell", requires_approval: true }] });
      const r = await api().call<{ job: JobView }>("POST", "/v1/jobs", {
        agent,
        input: { messages: [{ role: "user", content: shellCall("echo should-not-run") }] },
      });
      expect(r.status).toBe(202);
      const jobId = r.body.job.id;
      await expect.poll(async () => (await job(jobId)).state, { timeout: 30_000 }).toBe("waiting");
      const wf = (await job(jobId)).waiting_for;

      const page = await open("/jobs");
      await page.getByTestId("state-filter").selectOption("waiting");
      const row = page.locator(`tr[data-job-id="${jobId}"]`);
      await row.waitFor();
      expect(await row.locator(".state").textContent()).toBe("waiting");
      expect(await row.getByTestId("waiting-for").textContent()).toBe(" approve shell");
      // Only waiting jobs under the filter, as the API lists them.
      const listed = await api().call<{ jobs: JobView[] }>("GET", "/v1/jobs?state=waiting&limit=20");
      expect(await page.locator("tbody tr").evaluateAll((rs) => rs.map((x) => x.getAttribute("data-job-id")))).toEqual(
        listed.body.jobs.map((j) => j.id),
      );
      await shoot(page, "jobs-waiting");

      await row.getByRole("link").click();
      const line = page.getByTestId("waiting-for");
      await line.waitFor();
      expect(await line.textContent()).toBe(
        `waiting for an approval of shell (call ${wf?.call_id}) since ${wf?.since}, until ${wf?.deadline_at}, then deny`,
      );
      const card = page.getByTestId("approval-card");
      await card.waitFor();
      await shoot(page, "inspector-waiting", true);
      await card.getByLabel(/^Note/).focus();
      await page.keyboard.type("not on prod, please");
      await tabTo(page, card.getByRole("button", { name: "Deny" }));
      await page.keyboard.press("Enter");

      await expect.poll(() => page.getByTestId("inspector-state").textContent(), { timeout: 60_000 }).toBe("completed");
      const done = await job(jobId);
      expect(done.output).toContain("not on prod, please");
      const shown = (await page.getByTestId("inspector-answer").locator(".text").allTextContents()).join("");
      expect(shown).toBe(done.output);
      const types = (await eventsOf(jobId)).map((e) => e.type);
      expect(types).not.toContain("tool.call");
      expect(types).toContain("run.resumed");
      expect(await page.getByTestId("waiting-for").count()).toBe(0);
      await page.close();
    },
    120_000,
  );

  it("chat: an ask_user question gets a reply box, and the reply is the tool's answer", async () => {
    const agent = await defineAgent({ ask_user: true });
    const { page, jobId } = await chatWith(
      agent,
      mock({ tool_calls: [{ name: "ask_user", args: { question: "which colour?" } }] }),
    );
    const turn = page.locator(`li.turn[data-job-id="${jobId}"]`);
    const card = turn.getByTestId("approval-card");
    await card.waitFor({ timeout: 30_000 });
    expect(await card.getAttribute("data-kind")).toBe("input");
    expect(await card.getByTestId("approval-question").textContent()).toBe("which colour?");
    await expectAccessible(page, "chat with a question");
    await shoot(page, "ask-user-card");
    await card.getByLabel("Your answer").focus();
    await page.keyboard.type("ultramarine");
    await page.keyboard.press("Enter");

    await turn.getByTestId("total-latency").waitFor({ timeout: 60_000 });
    const done = await job(jobId);
    expect(done.state).toBe("completed");
    expect(done.output).toContain("ultramarine");
    expect((await turn.locator(".answer-text .text").allTextContents()).join("")).toBe(done.output);
    const inputs = await api().call<{ inputs: Array<{ content: string; status: string }> }>(
      "GET",
      `/v1/jobs/${jobId}/inputs`,
    );
    expect(inputs.body.inputs).toMatchObject([{ content: "ultramarine", status: "applied" }]);
    await page.close();
  }, 90_000);

  it("agents form: per-tool 'needs approval' and ask_user are what the API stores, and a new version keeps them", async () => {
    const name = `gated-form-${process.pid}`;
    const page = await open("/agents/_new");
    await page.getByTestId("agent-form").waitFor();
    await page.getByLabel("Name", { exact: true }).fill(name);
    const gate = page.getByLabel("shell needs approval");
    expect(await gate.isDisabled()).toBe(true); // only a chosen tool can be gated
    await page.getByRole("checkbox", { name: "shell", exact: true }).check();
    await page.getByRole("checkbox", { name: "read_file", exact: true }).check();
    await gate.check();
    await page.getByRole("checkbox", { name: /^ask_user/ }).check();
    await shoot(page, "agent-form-gates", true);
    await page.setViewportSize({ width: 380, height: 900 });
    await expectAccessible(page, "agent form with gates at 380px");
    await shoot(page, "agent-form-gates-narrow", true);
    await page.setViewportSize({ width: 1100, height: 900 });
    await page.getByRole("button", { name: "Create agent" }).click();
    await expect
      .poll(() => page.getByTestId("agent-definition").getAttribute("data-version"), { timeout: 10_000 })
      .toBe("1");
    const v1 = (await api().call<{ agent: AgentView }>("GET", `/v1/agents/${name}`)).body.agent;
    expect(v1.tools).toEqual([{ name: "shell", requires_approval: true, idempotent: false }, "read_file"]);
    expect(v1.ask_user).toBe(true);

    // A new version starts from v1's gates; unticking ask_user is the only change.
    await page.getByRole("button", { name: "New version" }).click();
    await page.getByTestId("agent-form").waitFor();
    expect(await page.getByLabel("shell needs approval").isChecked()).toBe(true);
    expect(await page.getByLabel("read_file needs approval").isChecked()).toBe(false);
    await page.getByRole("checkbox", { name: /^ask_user/ }).uncheck();
    await page.getByRole("button", { name: /Create version/ }).click();
    await expect
      .poll(() => page.getByTestId("agent-definition").getAttribute("data-version"), { timeout: 10_000 })
      .toBe("2");
    const v2 = (await api().call<{ agent: AgentView }>("GET", `/v1/agents/${name}`)).body.agent;
    expect(v2.tools).toEqual([{ name: "shell", requires_approval: true, idempotent: false }, "read_file"]);
    expect(v2.ask_user).toBe(false);
    expect(v2.approval).toEqual(v1.approval);
    await page.close();
  }, 60_000);

  it("inspector: a run's spend against its budget — the job's own limit narrowed from its agent's, on_budget, tokens and what was reserved", async () => {
    const agent = await defineAgent({ limits: { max_cost_usd: 2.5, max_tokens: 100_000, on_budget: "ask" } });
    const r = await api().call<{ job: JobView }>("POST", "/v1/jobs", {
      agent,
      input: { messages: [{ role: "user", content: "hello budget" }] },
      limits: { max_cost_usd: 1, on_budget: "fail" },
    });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    const id = r.body.job.id;
    await expect.poll(async () => (await job(id)).state, { timeout: 30_000 }).toBe("completed");
    const done = await job(id);
    expect(done.limits).toEqual({ max_cost_usd: 1, on_budget: "fail" });
    expect(done.budget_added_usd).toBe(0);
    // The stack's mock model is unpriced: nothing reserved, nothing spent.
    expect(done.usage.reserved_usd).toBe(0);
    const page = await open(`/jobs/${id}`);
    const budget = page.getByTestId("run-budget");
    await budget.waitFor();
    // The job's $1 under its agent's $2.5; its own on_budget replaces the agent's "ask".
    expect(await budget.getAttribute("data-limit")).toBe("1");
    expect(await budget.getAttribute("data-on-budget")).toBe("fail");
    const tokens = done.usage.prompt_tokens + done.usage.completion_tokens;
    await expect
      .poll(() => budget.textContent())
      .toMatch(
        new RegExp(
          `spent \\$0\\.0000 of \\$1\\.0000.*at the limit: fail.*reserved \\$0\\.0000.*${tokens} of 100000 tokens`,
        ),
      );
    expect(await budget.getByRole("meter").count()).toBe(1);
    await expectAccessible(page, "inspector with a budget");
    await page.close();
  }, 60_000);
});
