import { drizzle } from "drizzle-orm/node-postgres";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AgentDefinitionSchema, type AgentView } from "../../src/contracts/agent";
import type { JobView } from "../../src/contracts/job";
import { publishCodeTools, unpublishCodeTools } from "../../src/db/code-tools-repo";
import * as schema from "../../src/db/schema";
import { expectAccessible } from "../helpers/axe";
import { type BrowserHandle, CHROMIUM, consoleSuite, startBrowser } from "../helpers/browser";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) &&
  (await requireBinary(CHROMIUM, "apt-get install chromium"));

/** With a response_format the mock model answers the schema's minimal instance, an object with a string `label`. */
const SCHEMA = { type: "object", properties: { label: { type: "string" } }, required: ["label"] };

describe.runIf(canRun)("web console: agents", () => {
  // MCP on at the gateway, so an agent with mcp_servers can be defined (no server is called here).
  const t = useStack({ hosts: 1, gatewayVars: { MCP_ALLOWED_URLS: "https://mcp.example.com/" } });
  let chrome: BrowserHandle;
  const { open, shoot, api, job } = consoleSuite(t, () => chrome);

  beforeAll(async () => {
    chrome = await startBrowser();
  }, 60_000);
  afterAll(async () => {
    await chrome?.close();
  });

  /** Creates an agent with the console's form; returns once its page shows version 1. */
  async function createInConsole(page: Page, name: string, opts: { instructions: string; format?: object }) {
    await page.goto(`${t.stack.gatewayUrl}/#/agents`);
    await page.getByRole("link", { name: "New agent" }).click();
    const form = page.getByTestId("agent-form");
    await form.waitFor();
    await page.getByLabel("Name", { exact: true }).fill(name);
    await page.getByLabel("Instructions", { exact: true }).fill(opts.instructions);
    if (opts.format) await page.getByLabel("Response format (JSON Schema)").fill(JSON.stringify(opts.format));
    await page.getByRole("button", { name: "Create agent" }).click();
    await expect
      .poll(() => page.getByTestId("agent-definition").getAttribute("data-version"), { timeout: 10_000 })
      .toBe("1");
  }

  async function send(page: Page, text: string): Promise<string> {
    const before = await page.locator("li.turn").count();
    await page.getByRole("textbox", { name: "Message" }).fill(text);
    await page.getByRole("textbox", { name: "Message" }).press("Enter");
    const turn = page.locator("li.turn").nth(before);
    await expect.poll(() => turn.getAttribute("data-job-id"), { timeout: 20_000 }).toMatch(/^[0-9a-f-]{36}$/);
    return (await turn.getAttribute("data-job-id")) as string;
  }

  /** Waits for the answer's footer to show its tokens; returns the API's job view, then final. */
  async function finished(page: Page, jobId: string): Promise<JobView> {
    const usage = page.locator(`li.turn[data-job-id="${jobId}"]`).getByTestId("run-usage");
    await usage.waitFor({ timeout: 30_000 });
    const view = await job(jobId);
    expect(view.state).toBe("completed");
    return view;
  }

  /** The footer (or inspector line) facts as shown, in the API's terms. */
  async function shownFacts(scope: ReturnType<Page["locator"]>) {
    const usage = scope.getByTestId("run-usage");
    return {
      agent: await scope.getByTestId("run-agent").textContent(),
      usage: {
        prompt_tokens: Number(await usage.getAttribute("data-prompt")),
        completion_tokens: Number(await usage.getAttribute("data-completion")),
        estimated: (await usage.getAttribute("data-estimated")) === "true",
      },
      text: await usage.textContent(),
    };
  }

  const expectedFacts = (view: JobView) => ({
    agent: `agent ${view.agent?.name}@${view.agent?.version}`,
    usage: {
      prompt_tokens: view.usage.prompt_tokens,
      completion_tokens: view.usage.completion_tokens,
      estimated: view.usage.estimated,
    },
    text: `${view.usage.prompt_tokens} prompt + ${view.usage.completion_tokens} completion tokens${view.usage.estimated ? " (est.)" : ""}`,
  });

  it("creates an agent, runs it from chat as @1, runs a console-made version as @2, and archives it", async () => {
    const name = `triage-${process.pid}`;
    const page = await open("/agents");
    await page.getByRole("heading", { name: "Agents" }).waitFor();
    // The model picker offers exactly what GET /v1/models lists, the default preselected.
    const models = (await api().call<{ models: Array<{ name: string; default: boolean }> }>("GET", "/v1/models")).body
      .models;
    await page.getByRole("link", { name: "New agent" }).click();
    await page.getByTestId("agent-form").waitFor();
    const modelSelect = page.getByLabel("Model", { exact: true });
    await expect
      .poll(() => modelSelect.locator("option").allTextContents())
      .toEqual(models.map((m) => `${m.name}${m.default ? " (default)" : ""}`));
    expect(await modelSelect.inputValue()).toBe(models.find((m) => m.default)?.name);
    await shoot(page, "agents-new-form", true);

    // Bad input: the API's 400 message is shown, and nothing is created.
    await page.getByLabel("Name", { exact: true }).fill("Not A Name");
    await page.getByRole("button", { name: "Create agent" }).click();
    await expect
      .poll(() => page.getByTestId("agent-form").getByRole("alert").textContent())
      .toMatch(/^400 invalid_request: .*name/);
    await page.getByLabel("Name", { exact: true }).fill(name);
    await page.getByLabel("Response format (JSON Schema)").fill("{not json");
    await page.getByRole("button", { name: "Create agent" }).click();
    await expect
      .poll(() => page.getByTestId("agent-form").getByRole("alert").textContent())
      .toMatch(/^Response format is not JSON/);
    expect((await api().call("GET", `/v1/agents/${name}`)).status).toBe(404);

    await createInConsole(page, name, { instructions: "Label the ticket.", format: SCHEMA });
    const v1 = (await api().call<{ agent: AgentView }>("GET", `/v1/agents/${name}`)).body.agent;
    expect(v1).toMatchObject({ version: 1, instructions: "Label the ticket.", response_format: SCHEMA });
    expect(await page.locator('[data-field="instructions"]').textContent()).toBe("Label the ticket.");

    // "Chat with it": a new conversation whose messages run this agent.
    await page.getByRole("button", { name: "Chat with it" }).click();
    await expect.poll(() => page.getByTestId("socket-status").textContent(), { timeout: 20_000 }).toBe("connected");
    expect(await page.getByTestId("agent-picker").inputValue()).toBe(name);
    const first = await send(page, "The app crashes on start");
    const view1 = await finished(page, first);
    expect(view1.agent).toEqual({ name, version: 1 });
    expect(view1.usage.model_calls).toBeGreaterThan(0);
    expect(view1.usage.prompt_tokens).toBeGreaterThan(0);
    expect(view1.output_json).toEqual({ label: expect.any(String) });
    const footer1 = page.locator(`li.turn[data-job-id="${first}"]`);
    expect(await shownFacts(footer1)).toEqual(expectedFacts(view1));
    expect(JSON.parse((await footer1.getByTestId("output-json").textContent()) ?? "null")).toEqual(view1.output_json);
    expect(await footer1.getByTestId("output-json").textContent()).toBe(JSON.stringify(view1.output_json, null, 2));
    await shoot(page, "agents-chat-v1");

    // The run inspector shows the same facts.
    await footer1.getByRole("link", { name: "Inspect" }).click();
    const facts = page.getByTestId("inspector-facts");
    await facts.getByTestId("run-usage").waitFor();
    expect(await shownFacts(facts)).toEqual(expectedFacts(view1));
    await expect
      .poll(() => page.getByTestId("output-json").textContent())
      .toBe(JSON.stringify(view1.output_json, null, 2));
    await shoot(page, "agents-inspector", true);
    await page.goBack();
    const conversation = decodeURIComponent(new URL(page.url()).hash.replace("#/chat/", ""));

    // A new version from the console's form (starting from v1): free text this time.
    await page.goto(`${t.stack.gatewayUrl}/#/agents/${name}`);
    await page.getByRole("button", { name: "New version" }).click();
    expect(await page.getByLabel("Instructions", { exact: true }).inputValue()).toBe("Label the ticket.");
    await page.getByLabel("Instructions", { exact: true }).fill("Answer in plain text.");
    await page.getByLabel("Response format (JSON Schema)").fill("");
    await page.getByRole("button", { name: "Create version" }).click();
    await expect.poll(() => page.getByTestId("agent-definition").getAttribute("data-version")).toBe("2");
    // The versions list is read again after the save: polled, as it may still show the old page.
    await expect
      .poll(() =>
        page
          .getByTestId("agent-versions")
          .locator("li")
          .evaluateAll((li) => li.map((l) => l.getAttribute("data-version"))),
      )
      .toEqual(["2", "1"]);
    const v2 = (await api().call<{ agent: AgentView }>("GET", `/v1/agents/${name}`)).body.agent;
    expect(v2).toMatchObject({ version: 2, instructions: "Answer in plain text.", response_format: null });
    await shoot(page, "agents-detail", true);

    // The same conversation's next message runs @2; a provider that reports no usage is marked estimated.
    await page.goto(`${t.stack.gatewayUrl}/#/chat/${conversation}`);
    await expect.poll(() => page.getByTestId("socket-status").textContent(), { timeout: 20_000 }).toBe("connected");
    expect(await page.getByTestId("agent-picker").inputValue()).toBe(name);
    const second = await send(page, `!mock ${JSON.stringify({ reply: "a bug", no_usage: true })}`);
    const view2 = await finished(page, second);
    expect(view2.agent).toEqual({ name, version: 2 });
    expect(view2.usage.estimated).toBe(true);
    expect(view2.output_json).toBeNull();
    const footer2 = page.locator(`li.turn[data-job-id="${second}"]`);
    expect(await shownFacts(footer2)).toEqual(expectedFacts(view2));
    expect(await footer2.getByTestId("output-json").count()).toBe(0);
    // The reloaded conversation's first answer still shows @1 (its job view, not the picker's choice).
    expect(await shownFacts(footer1)).toEqual(expectedFacts(view1));
    await shoot(page, "agents-chat-v2");

    // Archive, by keyboard: the confirmation takes focus on its safe choice.
    await page.goto(`${t.stack.gatewayUrl}/#/agents/${name}`);
    await page.getByRole("button", { name: "Archive…" }).click();
    const confirm = page.getByTestId("archive-confirm");
    await confirm.waitFor();
    await expect.poll(() => page.evaluate(() => document.activeElement?.textContent)).toBe("Keep it");
    await shoot(page, "agents-archive-confirm");
    await page.keyboard.press("Shift+Tab");
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe(`Archive ${name}`);
    await page.keyboard.press("Enter");
    await page.getByTestId("archived").waitFor();
    const archived = (await api().call<{ agent: AgentView }>("GET", `/v1/agents/${name}`)).body.agent;
    expect(archived.archived_at).not.toBeNull();
    await page.goto(`${t.stack.gatewayUrl}/#/agents`);
    await page.getByRole("heading", { name: "Agents" }).waitFor();
    await expect.poll(async () => (await page.getByText("loading…").count()) === 0).toBe(true);
    expect(await page.locator(`tr[data-agent="${name}"]`).count()).toBe(0);
    const listed = (await api().call<{ agents: AgentView[] }>("GET", "/v1/agents?limit=100")).body.agents;
    expect(listed.map((a) => a.name)).not.toContain(name);

    // The conversation still names it (kept per conversation): its next message is refused with the API's conflict.
    await page.goto(`${t.stack.gatewayUrl}/#/chat/${conversation}`);
    await expect.poll(() => page.getByTestId("socket-status").textContent(), { timeout: 20_000 }).toBe("connected");
    expect(await page.getByTestId("agent-picker").inputValue()).toBe(name);
    const turns = await page.locator("li.turn").count();
    await page.getByRole("textbox", { name: "Message" }).fill("one more");
    await page.getByRole("textbox", { name: "Message" }).press("Enter");
    await expect
      .poll(() => page.locator("li.turn").nth(turns).getByRole("alert").textContent(), { timeout: 20_000 })
      .toMatch(/^conflict: /);
    expect(await page.locator("li.turn").nth(turns).getAttribute("data-job-id")).toBe("");
    await page.close();
  });

  /** A version's definition: the view without its identity. */
  const definitionOf = ({ name, version, latest_version, created_at, archived_at, ...d }: AgentView) => d;
  /** A definition that sets every field to something other than its default (the one profile excepted). */
  const everyField = (delegates: string[]) => ({
    description: "Routes tickets to the right desk",
    model: "mock-model",
    instructions: "Route the ticket.",
    tools: [{ name: "shell", requires_approval: true, idempotent: true }, "read_file"],
    mcp_servers: [
      {
        name: "tracker",
        url: "https://mcp.example.com/tracker",
        headers: { authorization: { secret: "TRACKER_TOKEN" } },
        tools: ["search", { name: "close_issue", requires_approval: true, idempotent: false }],
        timeout_ms: 5000,
      },
    ],
    approval: { deadline_s: 600, on_deadline: "fail" },
    ask_user: true,
    workspace: "conversation",
    delegates,
    limits: {
      max_turns: 5,
      max_output_tokens: 700,
      timeout_s: 120,
      max_cost_usd: 2.5,
      max_tokens: 50_000,
      on_budget: "ask",
    },
    priority: 7,
    sampling: { temperature: 0.3, top_p: 0.9 },
    sandbox_profile: "default",
    response_format: SCHEMA,
    recovery: { on_host_loss: "resume", max_recoveries: 5 },
  });

  it("carries every field of a definition through a version made in the console, and shows each on its page", async () => {
    const helpers = [`desk-a-${process.pid}`, `desk-b-${process.pid}`];
    for (const h of helpers)
      expect((await api().call("POST", "/v1/agents", { name: h, model: "mock-model" })).status).toBe(201);
    const full = everyField(helpers);
    // Every field of the contract, each away from its default: a field added later must join here.
    expect(Object.keys(full).sort()).toEqual(Object.keys(AgentDefinitionSchema.shape).sort());
    const defaults = AgentDefinitionSchema.parse({ model: "mock-model" }) as Record<string, unknown>;
    for (const [k, v] of Object.entries(full)) {
      if (k !== "model" && k !== "sandbox_profile") expect(v, k).not.toEqual(defaults[k]);
    }
    const name = `every-field-${process.pid}`;
    expect((await api().call("POST", "/v1/agents", { name, ...full })).status).toBe(201);
    const v1 = (await api().call<{ agent: AgentView }>("GET", `/v1/agents/${name}`)).body.agent;
    expect(definitionOf(v1)).toEqual(full);

    const page = await open(`/agents/${name}`);
    await page.getByRole("button", { name: "New version" }).click();
    await page.getByLabel("Instructions", { exact: true }).fill("Route the ticket, then say where.");
    await shoot(page, "agents-version-every-field", true);
    await page.getByRole("button", { name: "Create version" }).click();
    await expect.poll(() => page.getByTestId("agent-definition").getAttribute("data-version")).toBe("2");
    const v2 = (await api().call<{ agent: AgentView }>("GET", `/v1/agents/${name}`)).body.agent;
    expect(definitionOf(v2)).toEqual({ ...definitionOf(v1), instructions: "Route the ticket, then say where." });

    // The page shows every field of the version.
    const shown = (f: string) =>
      page
        .getByTestId("agent-definition")
        .locator(`[data-field="${f}"]`)
        .textContent()
        .then((x) => x ?? "");
    expect({
      description: await shown("description"),
      model: await shown("model"),
      instructions: await shown("instructions"),
      tools: await shown("tools"),
      mcp_servers: await page.locator('[data-field="mcp_servers"] li > div').allTextContents(),
      approval: await shown("approval"),
      ask_user: await shown("ask_user"),
      workspace: await shown("workspace"),
      delegates: await shown("delegates"),
      limits: [
        await shown("max_turns"),
        await shown("max_output_tokens"),
        await shown("timeout_s"),
        await shown("max_cost_usd"),
        await shown("max_tokens"),
        await shown("on_budget"),
      ],
      priority: await shown("priority"),
      sampling: [await shown("temperature"), await shown("top_p")],
      sandbox_profile: await shown("sandbox_profile"),
      response_format: JSON.parse(await shown("response_format")),
      recovery: await shown("recovery"),
    }).toEqual({
      description: full.description,
      model: full.model,
      instructions: "Route the ticket, then say where.",
      tools: "shell (needs approval), read_file",
      mcp_servers: [
        "tracker https://mcp.example.com/tracker",
        "tools: search, close_issue (needs approval)",
        "headers: authorization ← secret TRACKER_TOKEN · timeout 5000 ms",
      ],
      approval: "decide within 600 s, then fail",
      ask_user: "yes: may ask and wait for an answer",
      workspace: "conversation: a job starts from the workspace its conversation's last job left",
      delegates: helpers.join(", "),
      limits: ["5", "700", "120 s", "$2.5", "50000", "ask"],
      priority: "7",
      sampling: ["0.3", "0.9"],
      sandbox_profile: "default",
      response_format: SCHEMA,
      recovery: "resume from its journal, at most 5 times",
    });
    await shoot(page, "agents-detail-every-field", true);
    await page.close();
  });

  it("sets delegates, MCP servers, the wait's deadline and the priority from the new-agent form, and refuses MCP servers that are not a JSON array", async () => {
    const name = `form-every-${process.pid}`;
    const helper = `desk-c-${process.pid}`;
    expect((await api().call("POST", "/v1/agents", { name: helper, model: "mock-model" })).status).toBe(201);
    const { mcp_servers } = everyField([]);
    const page = await open("/agents/_new");
    await page.getByTestId("agent-form").waitFor();
    await page.getByLabel("Name", { exact: true }).fill(name);
    await page.getByLabel("Delegates").fill(helper);
    await page.getByLabel("Wait deadline (s)").fill("600");
    await page.getByLabel("At the deadline").selectOption("fail");
    await page.getByLabel("Priority").fill("-5");
    await page.getByLabel("MCP servers (JSON)").fill(JSON.stringify(mcp_servers[0]));
    await page.getByRole("button", { name: "Create agent" }).click();
    await expect
      .poll(() => page.getByTestId("agent-form").getByRole("alert").textContent())
      .toMatch(/^MCP servers must be a JSON array of servers/);
    await page.getByLabel("MCP servers (JSON)").fill("[{");
    await page.getByRole("button", { name: "Create agent" }).click();
    await expect
      .poll(() => page.getByTestId("agent-form").getByRole("alert").textContent())
      .toMatch(/^MCP servers is not JSON: /);
    expect((await api().call("GET", `/v1/agents/${name}`)).status).toBe(404);
    await page.getByLabel("MCP servers (JSON)").fill(JSON.stringify(mcp_servers, null, 2));
    await shoot(page, "agents-new-every-field", true);
    await page.getByRole("button", { name: "Create agent" }).click();
    await expect.poll(() => page.getByTestId("agent-definition").getAttribute("data-version")).toBe("1");
    const v1 = (await api().call<{ agent: AgentView }>("GET", `/v1/agents/${name}`)).body.agent;
    expect(v1).toMatchObject({
      delegates: [helper],
      mcp_servers,
      approval: { deadline_s: 600, on_deadline: "fail" },
      priority: -5,
    });
    await page.close();
  });

  it("shows a repaired answer as the last turn's text only, the refused turn above it as a step", async () => {
    const name = `repair-${process.pid}`;
    const schema = { type: "object", properties: { sentiment: { type: "string" } }, required: ["sentiment"] };
    expect(
      (await api().call("POST", "/v1/agents", { name, model: "mock-model", response_format: schema })).status,
    ).toBe(201);
    const conversation = `c-repair-${process.pid}`;
    const page = await open(`/chat/${conversation}`);
    await expect.poll(() => page.getByTestId("socket-status").textContent(), { timeout: 20_000 }).toBe("connected");
    await page.getByTestId("agent-picker").selectOption(name);
    const refused = "I think it is positive";
    const repaired = '{"sentiment": "positive"}';
    const jobId = await send(page, `!mock ${JSON.stringify({ replies: [refused, repaired] })}`);
    const view = await finished(page, jobId);
    expect(view.output).toBe(repaired);
    const events = await api().events(jobId);
    expect(events.filter((e) => e.event === "model.turn").map((e) => JSON.parse(e.data).payload)).toEqual([
      { turn: 1, reason: "start" },
      { turn: 2, reason: "repair" },
    ]);

    /** The answer's text spans, and each step's number, reason, head and text. */
    const shown = async (scope: ReturnType<Page["locator"]>) => ({
      answer: (await scope.locator(".answer-text .text").allTextContents()).join(""),
      steps: await scope.locator(".answer-text .step").evaluateAll((li) =>
        li.map((l) => ({
          turn: l.getAttribute("data-turn"),
          reason: l.getAttribute("data-reason"),
          head: l.querySelector(".step-head")?.textContent,
          text: [...l.querySelectorAll(".step-text")].map((t) => t.textContent).join(""),
        })),
      ),
    });
    const expected = {
      answer: repaired,
      steps: [{ turn: "1", reason: "start", head: "turn 1 · answer refused by the response format", text: refused }],
    };
    const turn = page.locator(`li.turn[data-job-id="${jobId}"]`);
    expect(await shown(turn)).toEqual(expected);
    await shoot(page, "chat-repair-steps");
    // The inspector folds the same log the same way.
    await page.goto(`${t.stack.gatewayUrl}/#/jobs/${jobId}`);
    const inspector = page.getByTestId("inspector-answer");
    await expect.poll(() => shown(inspector), { timeout: 10_000 }).toEqual(expected);
    await shoot(page, "inspector-repair-steps", true);
    await page.close();
  });

  it("offers the hosts' code tools (GET /v1/tools) beside the sandbox tools, and saves one checked", async () => {
    const db = drizzle(t.pool, { schema });
    await publishCodeTools(db, "console-test-host", [
      {
        name: "lookup_order",
        description: "Find an order by id",
        input_schema: { type: "object" },
        idempotent: true,
        requires_approval: false,
        timeout_ms: 5000,
      },
    ]);
    const page = await open("/agents/_new");
    try {
      await page.getByTestId("agent-form").waitFor();
      await page.getByLabel("Name", { exact: true }).fill("order-helper");
      const box = page.getByRole("checkbox", { name: "lookup_order", exact: true });
      await box.waitFor({ timeout: 10_000 });
      await box.check();
      await page.getByRole("button", { name: "Create agent" }).click();
      await expect
        .poll(() => page.getByTestId("agent-definition").getAttribute("data-version"), { timeout: 10_000 })
        .toBe("1");
      const stored = await api().call<{ agent: AgentView }>("GET", "/v1/agents/order-helper");
      expect(stored.body.agent.tools).toEqual(["lookup_order"]);
    } finally {
      await page.close();
      await unpublishCodeTools(db, "console-test-host");
    }
  });

  it("pages the agent list with its cursor", async () => {
    for (let i = 0; i < 22; i++) {
      const res = await api().call("POST", "/v1/agents", {
        name: `page-${process.pid}-${String(i).padStart(2, "0")}`,
        model: "mock-model",
      });
      expect(res.status).toBe(201);
    }
    const all = (await api().call<{ agents: AgentView[] }>("GET", "/v1/agents?limit=100")).body.agents.map(
      (a) => a.name,
    );
    const page = await open("/agents");
    const rows = () =>
      page
        .getByTestId("agents-table")
        .locator("tbody tr")
        .evaluateAll((r) => r.map((x) => x.getAttribute("data-agent")));
    await expect.poll(rows, { timeout: 10_000 }).toEqual(all.slice(0, 20));
    await page.getByRole("button", { name: "Next" }).click();
    await expect.poll(rows).toEqual(all.slice(20, 40));
    expect(await page.getByRole("button", { name: "Next" }).isDisabled()).toBe(all.length <= 40);
    await page.getByRole("button", { name: "Previous" }).click();
    await expect.poll(rows).toEqual(all.slice(0, 20));
    await page.close();
  });

  it("has no serious or critical accessibility violations on the Agents pages, wide and narrow", async () => {
    const name = `axe-${process.pid}`;
    const created = await api().call("POST", "/v1/agents", {
      name,
      model: "mock-model",
      description: "for the scan",
      instructions: "Be brief.",
      response_format: SCHEMA,
    });
    expect(created.status).toBe(201);
    expect((await api().call("POST", `/v1/agents/${name}/versions`, { model: "mock-model" })).status).toBe(201);
    for (const width of [1100, 380]) {
      const page = await open("/agents", width);
      await page.getByTestId("agents-table").waitFor();
      await expectAccessible(page, `agents list at ${width}px`);
      if (width < 500) await shoot(page, "agents-narrow-list", true);
      await page.goto(`${t.stack.gatewayUrl}/#/agents/${name}`);
      await page.getByTestId("agent-definition").waitFor();
      await page.getByTestId("agent-versions").locator("li").nth(1).waitFor();
      await expectAccessible(page, `agent detail at ${width}px`);
      await page.getByRole("button", { name: "Archive…" }).click();
      await page.getByTestId("archive-confirm").waitFor();
      await expectAccessible(page, `archive confirmation at ${width}px`);
      // Escape (or "Keep it") closes it and gives the focus back to "Archive…".
      await page.keyboard.press("Escape");
      await expect.poll(() => page.getByTestId("archive-confirm").count()).toBe(0);
      expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Archive…");
      await page.getByRole("button", { name: "New version" }).click();
      await page.getByTestId("agent-form").waitFor();
      await expectAccessible(page, `new version form at ${width}px`);
      if (width < 500) await shoot(page, "agents-narrow-form", true);
      await page.goto(`${t.stack.gatewayUrl}/#/agents/_new`);
      await page.getByLabel("Name", { exact: true }).waitFor();
      await expectAccessible(page, `new agent form at ${width}px`);
      await page.close();
    }
  });
});
