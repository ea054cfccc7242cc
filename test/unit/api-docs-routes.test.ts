/**
 * docs/api.md against the routes the gateway declares (workers/routes/route.ts; the OpenAPI
 * document is generated from those declarations, and test/workers/openapi.test.ts fails on a
 * route served without one, so the document's operations are the app's routes). Both ways:
 * every declared route has its own heading or route-table row in docs/api.md, and every
 * `METHOD /path` docs/api.md names, with the query parameters a heading lists, is one the
 * gateway declares. Generic on purpose: a new route fails here until docs/api.md documents it.
 */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { gatewayOpenApiDocument } from "../helpers/openapi-document";

const ROOT = resolve(import.meta.dirname, "../..");
const read = (file: string) => readFileSync(join(ROOT, file), "utf8");

/**
 * `## ` sections of docs/api.md about other servers than the gateway: their routes are not the
 * gateway's (a host's /metrics, its own /healthz). The test checks each still exists.
 */
const OTHER_SERVERS_SECTIONS = ["sandbox-host endpoints"];

/**
 * Routes docs/api.md names that reach no Worker route, each with why. `GET /` is the console's
 * static files, served from wrangler.toml's [assets] before the Worker runs (checked below).
 */
const NOT_WORKER_ROUTES: Record<string, string> = { "GET /": "[assets]" };

type Parameter = { name: string; in: string };
type Doc = { paths: Record<string, Record<string, { parameters?: Parameter[] }>> };

/** Declared routes: "METHOD /path" (path parameters as `{name}`) → the query parameters it reads. */
async function declaredRoutes(): Promise<Map<string, Set<string>>> {
  const doc = (await gatewayOpenApiDocument()) as unknown as Doc;
  const out = new Map<string, Set<string>>();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const query = (op.parameters ?? []).filter((p) => p.in === "query").map((p) => p.name);
      out.set(`${method.toUpperCase()} ${path}`, new Set(query));
    }
  }
  return out;
}

interface Mention {
  route: string;
  /** The query parameter names written after `?` (`?state=&limit=` → state, limit). */
  query: string[];
  line: number;
  /** A heading or the first cell of a table row: the place that documents the route. */
  documents: boolean;
  /** Where it documents it: a heading's text up to the next heading, or the table row. */
  section: string;
}

const MENTION = /`(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) (\/[^`\s?]*)(?:\?([^`\s]*))?`/g;

/** Every `METHOD /path` docs/api.md names, outside code blocks and the other servers' sections. */
function mentions(markdown: string): Mention[] {
  const out: Mention[] = [];
  let section = "";
  let inCode = false;
  const lines = markdown.split("\n");
  for (const [i, text] of lines.entries()) {
    if (text.startsWith("```")) inCode = !inCode;
    if (inCode) continue;
    if (text.startsWith("## ")) section = text.slice(3).trim();
    if (OTHER_SERVERS_SECTIONS.includes(section)) continue;
    const firstCell = text.startsWith("|") ? (text.split("|")[1] ?? "") : null;
    for (const m of text.matchAll(MENTION)) {
      const documents = text.startsWith("#") || (firstCell?.includes(m[0]) ?? false);
      const query = (m[3] ?? "")
        .split("&")
        .map((kv) => kv.split("=")[0] as string)
        .filter((name) => name !== "");
      const heading = text.startsWith("#");
      const end = heading ? lines.findIndex((l, j) => j > i && l.startsWith("#")) : i + 1;
      const section = lines.slice(i, end === -1 ? undefined : end).join("\n");
      out.push({ route: `${m[1]} ${m[2]}`, query, line: i + 1, documents, section });
    }
  }
  return out;
}

const apiMd = read("docs/api.md");
const declared = await declaredRoutes();
const named = mentions(apiMd);

describe("docs/api.md and the declared routes", () => {
  it("finds the routes on both sides (the parsing still works)", () => {
    expect(declared.size).toBeGreaterThan(20);
    expect(named.filter((m) => m.documents).length).toBeGreaterThan(20);
    expect(declared.has("POST /v1/jobs")).toBe(true);
    expect(named.some((m) => m.route === "POST /v1/jobs" && m.documents)).toBe(true);
  });

  it("every declared route has a heading or a route-table row in docs/api.md", () => {
    const documented = new Set(named.filter((m) => m.documents).map((m) => m.route));
    expect([...declared.keys()].filter((r) => !documented.has(r))).toEqual([]);
  });

  it("every query parameter a route declares is named where docs/api.md documents the route", () => {
    const missing: string[] = [];
    for (const [route, query] of declared) {
      const places = named.filter((m) => m.documents && m.route === route).map((m) => m.section);
      for (const q of query) {
        // `q`, ?q=, &q=: how docs/api.md writes a query parameter.
        const written = new RegExp(`[\`?&]${q}[\`=]`);
        if (places.length > 0 && !places.some((text) => written.test(text))) missing.push(`${route}: ${q}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it("every route docs/api.md names is declared, with the query parameters it lists", () => {
    const wrong: string[] = [];
    for (const m of named) {
      if (m.route in NOT_WORKER_ROUTES) continue;
      const query = declared.get(m.route);
      if (!query) {
        wrong.push(`docs/api.md:${m.line}: ${m.route} is not a declared route`);
        continue;
      }
      for (const q of m.query) {
        if (!query.has(q)) wrong.push(`docs/api.md:${m.line}: ${m.route} declares no query parameter ${q}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it("its exceptions still hold: the other servers' sections exist, `GET /` is the Worker's static assets", () => {
    const sections = [...apiMd.matchAll(/^## (.+)$/gm)].map((m) => (m[1] as string).trim());
    for (const s of OTHER_SERVERS_SECTIONS) expect(sections).toContain(s);
    expect(read("wrangler.toml")).toMatch(/^\[assets\]/m);
    for (const route of Object.keys(NOT_WORKER_ROUTES)) expect(declared.has(route)).toBe(false);
  });
});
