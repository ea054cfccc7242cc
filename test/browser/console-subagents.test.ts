import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobView } from "../../src/contracts/job";
import { expectAccessible } from "../helpers/axe";
import { type BrowserHandle, CHROMIUM, consoleSuite, startBrowser } from "../helpers/browser";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) &&
  (await requireBinary(CHROMIUM, "apt-get install chromium"));

interface TreeNode {
  id: string;
  state: string;
  parent_job_id: string | null;
  children: TreeNode[];
}

const mock = (script: unknown) => `!mock ${JSON.stringify(script)}`;

describe.runIf(canRun)("web console: sub-agents in the run inspector", () => {
  const t = useStack({ hosts: 1 });
  let chrome: BrowserHandle;
  const { open, shoot, api, job } = consoleSuite(t, () => chrome);

  beforeAll(async () => {
    chrome = await startBrowser();
  }, 60_000);
  afterAll(async () => {
    await chrome?.close();
  });

  it("the parent's inspector lists the tree's children as completed; a child links back to its parent", async () => {
    const worker = `worker-${process.pid}`;
    const boss = `boss-${process.pid}`;
    for (const def of [
      { name: worker, description: "Does one task." },
      { name: boss, delegates: [worker] },
    ]) {
      const r = await api().call("POST", "/v1/agents", { model: t.stack.modelName, ...def });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
    }
    const submitted = await api().call<{ job: JobView }>("POST", "/v1/jobs", {
      agent: boss,
      input: {
        messages: [
          {
            role: "user",
            content: mock({
              tool_calls: ["task-a", "task-b"].map((input) => ({ name: `delegate_${worker}`, args: { input } })),
            }),
          },
        ],
      },
    });
    expect(submitted.status, JSON.stringify(submitted.body)).toBe(202);
    const parentId = submitted.body.job.id;
    await expect.poll(async () => (await job(parentId)).state, { timeout: 60_000, interval: 200 }).toBe("completed");

    const tree = await api().call<{ tree: TreeNode }>("GET", `/v1/jobs/${parentId}/tree`);
    expect(tree.status).toBe(200);
    const kids = tree.body.tree.children;
    expect(kids).toHaveLength(2);
    for (const k of kids) expect(k).toMatchObject({ state: "completed", parent_job_id: parentId });

    const page = await open(`/jobs/${parentId}`);
    await expect.poll(() => page.getByTestId("inspector-state").textContent(), { timeout: 20_000 }).toBe("completed");
    const section = page.getByTestId("inspector-children");
    const items = section.locator("li");
    // child.finished of both arrives with the rest of the log; wait until both show their state.
    await expect.poll(() => items.locator(".state").count(), { timeout: 20_000 }).toBe(2);
    const listed = await items.evaluateAll((lis) =>
      lis.map((li) => ({
        id: li.getAttribute("data-job-id"),
        href: li.querySelector("a")?.getAttribute("href"),
        state: li.querySelector(".state")?.textContent,
        text: li.textContent,
      })),
    );
    expect(listed.map((l) => l.id).sort()).toEqual(kids.map((k) => k.id).sort());
    for (const l of listed) {
      expect(l.href).toBe(`#/jobs/${l.id}`);
      expect(l.state).toBe("completed");
      expect(l.text).toContain(`agent ${worker} for call `);
    }
    // The parent is the root: it names no parent of its own.
    expect(await page.locator(".meta").first().textContent()).not.toContain("delegated by");
    await shoot(page, "inspector-parent", true);
    await expectAccessible(page, "inspector of a parent job at 1100px");

    // Follow the first child's link: its inspector names the parent, linking back.
    const childId = listed[0]!.id as string;
    await items.first().getByRole("link").click();
    await expect.poll(() => page.url()).toContain(`#/jobs/${childId}`);
    await expect.poll(() => page.locator("h2 code").textContent(), { timeout: 20_000 }).toBe(childId);
    await expect.poll(() => page.getByTestId("inspector-state").textContent(), { timeout: 20_000 }).toBe("completed");
    const meta = page.getByTestId("inspector-state").locator("xpath=..");
    await expect.poll(() => meta.textContent()).toContain(`delegated by ${parentId.slice(0, 8)} (depth 1)`);
    const back = meta.getByRole("link", { name: parentId.slice(0, 8) });
    expect(await back.getAttribute("href")).toBe(`#/jobs/${parentId}`);
    // A leaf has no child jobs.
    expect(await page.getByTestId("inspector-children").count()).toBe(0);
    const childOutput = (await job(childId)).output;
    expect(childOutput).toMatch(/Echo: task-[ab]/);
    await expect
      .poll(async () => (await page.getByTestId("inspector-answer").locator(".text").allTextContents()).join(""))
      .toBe(childOutput);
    await shoot(page, "inspector-child", true);
    await expectAccessible(page, "inspector of a child job at 1100px");
    await page.setViewportSize({ width: 380, height: 900 });
    await expectAccessible(page, "inspector of a child job at 380px");
    await shoot(page, "inspector-child-narrow", true);

    // And back up through the link.
    await page.setViewportSize({ width: 1100, height: 900 });
    await back.click();
    await expect.poll(() => page.locator("h2 code").textContent(), { timeout: 20_000 }).toBe(parentId);
    await section.waitFor({ timeout: 20_000 });
    await page.setViewportSize({ width: 380, height: 900 });
    await expectAccessible(page, "inspector of a parent job at 380px");
    await shoot(page, "inspector-parent-narrow", true);
    await page.close();
  }, 120_000);
});
