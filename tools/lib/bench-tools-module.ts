/**
 * The tools `npm run bench:code-tools` (bench/code-tools.ts) loads as its HOST_TOOLS module: a trivial one (what a
 * call costs beyond the tool's own work) and one that holds its thread (what a blocked tool
 * costs everyone else).
 */
import { z } from "zod";
import { defineTool } from "../../src/code-tools/define-tool";

export const echo = defineTool({
  name: "echo",
  description: "Returns its text",
  input: z.object({ text: z.string() }),
  run: async ({ text }) => ({ echoed: text }),
});

export const spin = defineTool({
  name: "spin",
  description: "Holds its thread for ms of CPU",
  input: z.object({ ms: z.number().int().min(0) }),
  timeout_ms: 600_000,
  run: ({ ms }) => {
    const start = performance.now();
    while (performance.now() - start < ms) {
      // spin
    }
    return { spun_ms: Math.round(performance.now() - start) };
  },
});
