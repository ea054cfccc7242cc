/**
 * The console's evals pages and the run inspector's steps, in Chromium against the real stack
 * (one host, the mock model): two evals of two agent versions over the same case, listed with
 * their pass rates as the API has them, picked and shown side by side (summaries and the case's
 * two answers and scores); one eval's cases and scores; a job's steps as GET …/steps lists them,
 * and a rerun and a fork made from the inspector open the new job, whose `forked_from` the API
 * confirms. axe on each page at 1280 and 390 px.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { EvalView } from "../../src/contracts/eval";
import type { StepView } from "../../src/contracts/fork";
import { waitFor } from "../../tools/stack/services/ports";
import { expectAccessible } from "../helpers/axe";
import { type BrowserHandle, CHROMIUM, consoleSuite, startBrowser } from "../helpers/browser";
import { requireDocker } from "../helpers/docker";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) &&
  (await requireBinary(CHROMIUM, "apt-get install chromium"));

const docker = canRun ? await requireDocker() : null;

const WIDTHS = [1280, 390] as const;
const CASES = [{ input: { messages: [{ role: "user", content: '!mock {"echo_system":true}' }] }, expect: "Paris" }];

describe.runIf(canRun)("web console: evals side by side, a run's steps, fork and rerun", () => {
  const t = useStack({ hosts: 1 });
  let chrome: BrowserHandle;
  const { open, shoot, api, job } = consoleSuite(t, () => chrome);
  let a = "";
  let b = "";

  const makeEval = async (agent: string) => {
    const r = await api().call<{ eval: { id: string } }>("POST", "/v1/evals", {
      agent,
      cases: CASES,
      scorers: [{ type: "equals" }],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    return r.body.eval.id;
  };
  // waitFor, not expect.poll: it is also called from beforeAll, outside any test.
  const scored = (id: string) =>
    waitFor(
      `eval ${id} to be scored`,
      async () => {
        const e = (await api().call<{ eval: EvalView }>("GET", `/v1/evals/${id}`)).body.eval;
        return e.summary.scored === e.cases_total ? e : null;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );

  beforeAll(async () => {
    chrome = await startBrowser();
    const first = await api().call("POST", "/v1/agents", {
      name: "capital",
      model: "mock-model",
      instructions: "Paris",
    });
    expect(first.status).toBe(201);
    const second = await api().call("POST", "/v1/agents/capital/versions", {
      model: "mock-model",
      instructions: "Lyon",
    });
    expect(second.status).toBe(201);
    a = await makeEval("capital@1");
    b = await makeEval("capital@2");
    await scored(a);
    await scored(b);
  }, 120_000);
  afterAll(async () => {
    await chrome?.close();
  });

  it("lists the evals with their pass rates, and two picked ones side by side, case by case", async () => {
    for (const width of WIDTHS) {
      const page = await open("/evals", width);
      const rows = page.getByTestId("evals-table").locator("tbody tr");
      await expect.poll(() => rows.count(), { timeout: 20_000 }).toBe(2);
      expect(await page.locator(`tr[data-eval-id="${a}"] [data-testid=pass-rate]`).textContent()).toBe("100%");
      expect(await page.locator(`tr[data-eval-id="${b}"] [data-testid=pass-rate]`).textContent()).toBe("0%");
      await expectAccessible(page, `evals list at ${width}px`);
      await shoot(page, `evals-${width}`);

      await page.getByLabel(`Pick eval ${a.slice(0, 8)} to compare`).check();
      await page.getByLabel(`Pick eval ${b.slice(0, 8)} to compare`).check();
      await page.getByTestId("compare-link").click();
      await page.getByRole("heading", { name: "Two evals side by side" }).waitFor();
      expect(page.url()).toContain(`#/evals/${a}/compare/${b}`);
      const pair = page.getByTestId("compare-pairs").locator('tr[data-case="0"]');
      await pair.waitFor();
      expect(await pair.getByTestId("a-output").textContent()).toBe("Paris");
      expect(await pair.getByTestId("b-output").textContent()).toBe("Lyon");
      expect(await pair.getByTestId("a-score").textContent()).toBe("1.00");
      expect(await pair.getByTestId("b-score").textContent()).toBe("0.00");
      expect(await pair.getByTestId("score-delta").textContent()).toBe("-1.00");
      const passRate = page.getByTestId("compare-summary").locator('tr[data-measure="pass rate"] td');
      expect(await passRate.allTextContents()).toEqual(["100%", "0%"]);
      await expectAccessible(page, `evals compared at ${width}px`);
      await shoot(page, `evals-compare-${width}`, true);
      await page.close();
    }
  }, 120_000);

  it("shows one eval's cases with their scores", async () => {
    const e = await scored(a);
    for (const width of WIDTHS) {
      const page = await open(`/evals/${a}`, width);
      const row = page.getByTestId("eval-cases").locator('tr[data-case="0"]');
      await row.waitFor({ timeout: 20_000 });
      expect(await row.getByTestId("case-output").textContent()).toBe("Paris");
      expect(await row.getByTestId("case-pass").textContent()).toBe("pass");
      expect(await row.locator(`a[href="#/jobs/${e.cases[0]?.job_id}"]`).count()).toBe(1);
      expect(await page.getByTestId("eval-summary").textContent()).toContain("100%");
      await expectAccessible(page, `an eval at ${width}px`);
      await page.close();
    }
  }, 60_000);

  // A text answer journals no step (the terminal write holds it): a tool call in a sandbox makes some.
  it.runIf(docker !== null)(
    "shows a job's steps, and a rerun and a fork made there open the new job",
    async () => {
      const submitted = await api().call<{ job: { id: string } }>("POST", "/v1/jobs", {
        input: {
          messages: [
            {
              role: "user",
              content: `!mock ${JSON.stringify({ tool_calls: [{ name: "shell", args: { command: "echo steps" } }] })}`,
            },
          ],
        },
        tools: ["shell"],
      });
      expect(submitted.status).toBe(202);
      const source = submitted.body.job.id;
      await waitFor("the tool job to finish", async () => ((await job(source)).finished_at ? true : null), {
        timeoutMs: 90_000,
        intervalMs: 200,
      });
      expect((await job(source)).state).toBe("completed");
      const steps = (await api().call<{ steps: StepView[] }>("GET", `/v1/jobs/${source}/steps`)).body.steps;
      expect(steps.length).toBeGreaterThan(0);
      for (const width of WIDTHS) {
        const page = await open(`/jobs/${source}`, width);
        const rows = page.getByTestId("steps-table").locator("tbody tr");
        await expect.poll(() => rows.count(), { timeout: 20_000 }).toBe(steps.length);
        expect(await rows.first().locator("td").first().textContent()).toBe(String(steps[0]?.step));
        await expectAccessible(page, `the inspector with its steps at ${width}px`);
        await page.close();
      }

      const page = await open(`/jobs/${source}`);
      await page.getByTestId("steps-table").waitFor({ timeout: 20_000 });
      await page.getByTestId("rerun").click();
      await expect.poll(() => page.url(), { timeout: 20_000 }).not.toContain(source);
      const rerun = page.url().split("#/jobs/")[1] as string;
      await page.getByTestId("forked-from").waitFor({ timeout: 20_000 });
      expect(await page.getByTestId("forked-from").textContent()).toContain("a rerun");
      expect((await job(rerun)).forked_from).toEqual({ job_id: source, step: 0 });

      await page.goto(`${t.stack.gatewayUrl}/#/jobs/${source}`);
      await page.getByTestId("steps-table").waitFor({ timeout: 20_000 });
      await page.getByLabel("Agent for the new job").fill("capital@2");
      await page.getByRole("button", { name: `Fork after step ${steps[0]?.step}`, exact: true }).click();
      await expect.poll(() => page.url(), { timeout: 20_000 }).not.toContain(source);
      const fork = page.url().split("#/jobs/")[1] as string;
      expect(fork).not.toBe(rerun);
      await page.getByTestId("forked-from").waitFor({ timeout: 20_000 });
      expect(await page.getByTestId("forked-from").textContent()).toContain(`after step ${steps[0]?.step}`);
      const forked = await job(fork);
      expect(forked.forked_from).toEqual({ job_id: source, step: steps[0]?.step });
      expect(forked.agent).toEqual({ name: "capital", version: 2 });
      await page.close();
    },
    120_000,
  );
});
