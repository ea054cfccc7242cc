/**
 * An axe-core scan of a page in the browser tests, plus the narrow-screen check that goes with it:
 * no serious or critical violation, and nothing makes the page itself scroll sideways.
 */
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import type { Page } from "playwright-core";
import { expect } from "vitest";

let axeSource: string | undefined;

export async function expectAccessible(page: Page, where: string): Promise<void> {
  axeSource ??= await readFile(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
  await page.evaluate(axeSource);
  const violations = await page.evaluate(async () => {
    const axe = (
      globalThis as unknown as {
        axe: {
          run(ctx: Document): Promise<{
            violations: Array<{ id: string; impact: string | null; nodes: Array<{ target: unknown }> }>;
          }>;
        };
      }
    ).axe;
    const r = await axe.run(document);
    return r.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      targets: v.nodes.map((n) => JSON.stringify(n.target)),
    }));
  });
  const bad = violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  expect(bad, `${where}: ${JSON.stringify(bad, null, 2)}`).toEqual([]);
  const { scrollWidth, clientWidth } = await page.evaluate(() => ({
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
  }));
  expect(scrollWidth, `${where}: page wider than the window`).toBeLessThanOrEqual(clientWidth);
}
