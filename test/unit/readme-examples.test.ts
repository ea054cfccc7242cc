/**
 * The README's hand-run examples work on the stack `npm run dev` started, wherever its gateway
 * listens: every curl names the gateway as `$GW`, read from `.dev/stack.json`'s gateway_url (the
 * examples hardcoded localhost:8787, wrong under GATEWAY_PORT), and that file has the key. And
 * the mock model's script is what the README says: `!mock` must start the message.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { parseScript } from "../../tools/mock-model/script";

const ROOT = resolve(import.meta.dirname, "..", "..");
const readme = readFileSync(resolve(ROOT, "README.md"), "utf8");
const shellBlocks = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1] as string);

describe("README examples", () => {
  it("send every curl to the gateway URL from .dev/stack.json", () => {
    const curls = [...shellBlocks.flatMap((b) => b.split("\n")), ...readme.split("\n")]
      .flatMap((line) => [...line.matchAll(/curl [^`\n]*/g)].map((m) => m[0]))
      .filter((c) => /\/v1\/|openapi|cdn-cgi/.test(c));
    expect(curls.length).toBeGreaterThan(4);
    expect(curls.filter((c) => !c.includes("$GW/") && !c.includes('"$GW/'))).toEqual([]);
    expect(readme).toContain(`GW=$(node -p 'require("./.dev/stack.json").gateway_url')`);
    expect(readFileSync(resolve(ROOT, "tools", "stack", "start.ts"), "utf8")).toMatch(/\bgateway_url: gateway\.url\b/);
  });

  it("say that `!mock` must start the message, as the mock model reads it", () => {
    expect(readme).toMatch(/user message that starts with `!mock`/);
    expect(parseScript('  !mock {"reply":"x"}')).toEqual({ reply: "x" });
    expect(parseScript('please !mock {"reply":"x"}')).toBeNull();
  });
});
