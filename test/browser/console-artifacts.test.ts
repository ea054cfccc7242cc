/**
 * The run inspector's artifacts in Chromium against the real stack: a job whose run left files
 * under /workspace/out/ lists them once it has ended, and a click downloads each through the
 * typed client with the console's credential, byte for byte (the bytes are read from the Blob the
 * page hands to its download link); a run that left none says so.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobView } from "../../src/contracts/job";
import { expectAccessible } from "../helpers/axe";
import { type BrowserHandle, CHROMIUM, consoleSuite, startBrowser } from "../helpers/browser";
import { requireDocker } from "../helpers/docker";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireDocker()) !== null &&
  (await requireBinary("redis-server", "apt-get install redis-server")) &&
  (await requireBinary(CHROMIUM, "apt-get install chromium"));

const mock = (script: unknown) => `!mock ${JSON.stringify(script)}`;

describe.runIf(canRun)("web console: a run's artifacts in the run inspector", () => {
  const t = useStack({ hosts: 1 });
  let chrome: BrowserHandle;
  const { open, shoot, api, job } = consoleSuite(t, () => chrome);

  beforeAll(async () => {
    chrome = await startBrowser();
  }, 60_000);
  afterAll(async () => {
    await chrome?.close();
  });

  async function submit(toolCalls: unknown[]): Promise<string> {
    const r = await api().call<{ job: JobView }>("POST", "/v1/jobs", {
      input: { messages: [{ role: "user", content: mock({ tool_calls: toolCalls, reply: "done" }) }] },
      tools: ["shell", "write_file"],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    const id = r.body.job.id;
    await expect.poll(async () => (await job(id)).state, { timeout: 60_000, interval: 200 }).toBe("completed");
    return id;
  }

  it("lists the files the run left under /workspace/out/ and downloads one byte for byte", async () => {
    const binary = randomBytes(20_000);
    const id = await submit([
      { name: "write_file", args: { path: "out/chart.png", content: binary.toString("base64"), encoding: "base64" } },
      { name: "shell", args: { command: "mkdir -p out/notes && echo 'hello artifacts' > out/notes/readme.txt" } },
    ]);

    const page = await open(`/jobs/${id}`);
    const section = page.getByTestId("inspector-artifacts");
    await expect.poll(() => section.locator("li").count(), { timeout: 20_000 }).toBe(2);
    const listed = await section.locator("li").evaluateAll((lis) => lis.map((li) => li.getAttribute("data-path")));
    expect(listed).toEqual(["chart.png", "notes/readme.txt"]);
    expect(await section.locator("li").first().textContent()).toContain("image/png");
    await expectAccessible(page, "[data-testid=inspector-artifacts]");
    await shoot(page, "inspector-artifacts");

    // The download: the Blob handed to the object URL and the name on the link, captured in the
    // page (the click itself would save a file where no test reads it).
    await page.evaluate(() => {
      const w = window as unknown as { __blobs: Blob[]; __names: string[] };
      w.__blobs = [];
      w.__names = [];
      const create = URL.createObjectURL.bind(URL);
      URL.createObjectURL = (b: Blob | MediaSource) => {
        if (b instanceof Blob) w.__blobs.push(b);
        return create(b);
      };
      HTMLAnchorElement.prototype.click = function (this: HTMLAnchorElement) {
        w.__names.push(this.download);
      };
    });
    await section.getByRole("button", { name: "chart.png" }).click();
    await expect
      .poll(() => page.evaluate(() => (window as unknown as { __names: string[] }).__names), { timeout: 10_000 })
      .toEqual(["chart.png"]);
    const downloaded = await page.evaluate(async () => {
      const blob = (window as unknown as { __blobs: Blob[] }).__blobs[0] as Blob;
      return { type: blob.type, bytes: Array.from(new Uint8Array(await blob.arrayBuffer())) };
    });
    expect(downloaded.type).toBe("image/png");
    expect(Buffer.from(downloaded.bytes).equals(binary)).toBe(true);
    await page.close();
  }, 120_000);

  it("a run that left nothing under /workspace/out/ says so", async () => {
    const id = await submit([{ name: "shell", args: { command: "echo scratch > notes.txt" } }]);
    const page = await open(`/jobs/${id}`);
    await expect
      .poll(() => page.getByTestId("inspector-artifacts").textContent(), { timeout: 20_000 })
      .toContain("none: the run left no file under /workspace/out/");
    await page.close();
  }, 120_000);
});
