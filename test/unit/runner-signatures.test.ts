/**
 * The run path passes one execution object, not a clump: no function in
 * sandbox-host/runner/ takes more than MAX_POSITIONAL parameters; what else a step needs it
 * takes as named options. Before the `Execution` object `runCalls` took 11, `recordUsage` 8,
 * `streamModelTurn` 7 — 12 of 141 functions took more than 4 — and each new need was one more
 * position. Counted on the syntax tree, not by regex: functions, arrows, methods, getters and
 * function types alike, a destructured options object counting as one.
 *
 * The parser is `rolldown/parseAst` (the oxc parser), which this repo does not depend on
 * directly: it comes with vite 8, which is built on rolldown. TypeScript here is 7 (the native
 * compiler), which has no JS API to parse with.
 */
import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { parseAst } from "rolldown/parseAst";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
const DIR = "sandbox-host/runner";
const MAX_POSITIONAL = 4;

interface Signature {
  where: string;
  params: number;
}

type Node = { type?: string; start?: number; params?: unknown[]; [k: string]: unknown };

/** The name a function is known by: its own, or the declarator, method or property holding it. */
function nameOf(node: Node): string | null {
  const key = (node.key ?? node.id) as { name?: string } | undefined;
  return typeof key?.name === "string" ? key.name : null;
}

const HOLDERS = new Set([
  "VariableDeclarator",
  "MethodDefinition",
  "Property",
  "PropertyDefinition",
  "TSMethodSignature",
]);
const FUNCTION_LIKE = /Function|MethodSignature|CallSignature|ConstructSignature/;

async function signatures(dir: string): Promise<Signature[]> {
  const out: Signature[] = [];
  const files = (await readdir(join(ROOT, dir), { recursive: true })).filter((f) => f.endsWith(".ts")).sort();
  for (const file of files) {
    const text = await readFile(join(ROOT, dir, file), "utf8");
    const line = (offset: number) => text.slice(0, offset).split("\n").length;
    const walk = (node: unknown, holder: string | null): void => {
      if (!node || typeof node !== "object") return;
      if (Array.isArray(node)) {
        for (const child of node) walk(child, holder);
        return;
      }
      const n = node as Node;
      const name = n.type && HOLDERS.has(n.type) ? (nameOf(n) ?? holder) : holder;
      if (n.type && FUNCTION_LIKE.test(n.type) && Array.isArray(n.params)) {
        const own = n.type === "FunctionDeclaration" || n.type === "FunctionExpression" ? nameOf(n) : null;
        out.push({ where: `${file}:${line(n.start ?? 0)} ${own ?? name ?? "<anonymous>"}`, params: n.params.length });
      }
      for (const [k, child] of Object.entries(n)) if (k !== "parent") walk(child, name);
    };
    walk(parseAst(text, { lang: "ts" }), null);
  }
  return out;
}

describe(`${DIR}: one execution object, named options`, () => {
  it(`no function takes more than ${MAX_POSITIONAL} positional parameters`, async () => {
    const all = await signatures(DIR);
    // The walk must see the folder's functions, or the bound below would pass on nothing.
    expect(all.length).toBeGreaterThan(100);
    expect(all.some((s) => / runJob$/.test(s.where))).toBe(true);
    const over = all.filter((s) => s.params > MAX_POSITIONAL).map((s) => `${s.where} takes ${s.params}`);
    expect(over).toEqual([]);
  });
});
