/**
 * The docs' mechanical facts, checked against the code they describe, so they cannot drift again
 * unnoticed (a review found each of these wrong): docs/architecture.md's parts table against the
 * Durable Object classes workers/index.ts exports and wrangler.toml binds, each object's SQLite
 * tables against its CREATE TABLE statements, the trigger count against drizzle/*.sql, and
 * tools/README.md against the files under tools/ (and tools/ keeps its shape: no `x.ts` beside `x/`,
 * every bench on the harness). Also one number two modules used to disagree
 * on: the lease store's default heartbeat is the hosts' own. And what architecture.md's reading
 * order, "Fact → its one home" and "Known duplicates" name: every repository path exists, each
 * name a duplicate row pairs with a file is in that file, the Postgres row lists exactly the
 * migrations that make triggers, and every code name they and the run path ("The three
 * identities", its drawing included) give is still in the product code; and no doc or source file points
 * at a tracker's issue number, which no reader of the repository can open: it says why in words.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { hostConfigFromEnv } from "../../sandbox-host/host-config";
import { createLeaseStore } from "../../src/quota/lease-store";
import { createRedisClient } from "../../src/quota/redis";
import { MINIMAL_HOST_ENV } from "../helpers/host-env";

const ROOT = resolve(import.meta.dirname, "../..");
const read = (file: string) => readFileSync(join(ROOT, file), "utf8");
const architecture = read("docs/architecture.md");

const NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"];
/** The number a phrase like "the three triggers" names: the word `pattern` captures, as a number. */
function namedCount(text: string, pattern: RegExp): number {
  const word = pattern.exec(text)?.[1];
  expect(word, `${pattern} is not in the text`).toBeDefined();
  return NUMBER_WORDS.indexOf((word as string).toLowerCase());
}

/** The classes workers/index.ts re-exports from workers/durable-objects/. */
function exportedObjects(): string[] {
  const names = [...read("workers/index.ts").matchAll(/^export \{ (\w+) \} from "\.\/durable-objects\//gm)];
  return names.map((m) => m[1] as string).sort();
}

/** The parts table's Durable Object rows: the class, its code files and the tables it names. */
function objectRows(): Array<{ name: string; files: string[]; tables: string[] }> {
  const rows = architecture.split("\n").filter((l) => /^\| `\w+` \(Durable Object/.test(l));
  return rows.map((row) => {
    const [first, code, owns] = row.split(" | ").map((c) => c.trim());
    const name = /`(\w+)`/.exec(first ?? "")?.[1] as string;
    // Files after the first are named relative to its folder (`event-log.ts`).
    const named = [...(code ?? "").matchAll(/`([^`]+\.ts)`/g)].map((m) => m[1] as string);
    const dir = (named[0] ?? "").replace(/[^/]+$/, "");
    const files = named.map((f) => (f.includes("/") ? f : dir + f));
    const list = /\(tables? ([^)]*)\)/.exec(owns ?? "")?.[1] ?? "";
    const tables = [...list.matchAll(/`(\w+)`/g)].map((m) => m[1] as string).sort();
    return { name, files, tables };
  });
}

/** wrangler.toml's Durable Object bindings: the top level's, then each named environment's. */
function boundClasses(): Record<string, string[]> {
  const toml = read("wrangler.toml").replace(/^\s*#.*$/gm, "");
  const parts = toml.split(/^\[env\.(\w+)\]$/m);
  const out: Record<string, string[]> = {};
  const classes = (text: string) => [...text.matchAll(/class_name = "(\w+)"/g)].map((m) => m[1] as string).sort();
  out.top = classes(parts[0] as string);
  for (let i = 1; i < parts.length; i += 2) out[parts[i] as string] = classes(parts[i + 1] as string);
  out.migrations = [...toml.matchAll(/new_sqlite_classes = \[([^\]]*)\]/g)]
    .flatMap((m) => [...(m[1] as string).matchAll(/"(\w+)"/g)].map((n) => n[1] as string))
    .sort();
  return out;
}

/** Every file under `dir`, by its path there. */
function walk(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: "utf8" }).filter((f) =>
    statSync(join(ROOT, dir, f)).isFile(),
  );
}

describe("docs/architecture.md against the code", () => {
  it("the parts table has a row for every Durable Object class workers/index.ts exports, and wrangler.toml binds each", () => {
    const exported = exportedObjects();
    expect(exported.length).toBeGreaterThan(0);
    expect(
      objectRows()
        .map((r) => r.name)
        .sort(),
    ).toEqual(exported);
    const bound = boundClasses();
    expect(Object.keys(bound).sort()).toEqual(["migrations", "production", "staging", "top"]);
    for (const [where, classes] of Object.entries(bound)) expect(classes, `wrangler.toml: ${where}`).toEqual(exported);
    expect(
      namedCount(architecture, /`workers\/index\.ts` — [^.]*?the (\w+) Durable\s+Object classes/),
      "the reading order",
    ).toBe(exported.length);
  });

  it("each Durable Object row names exactly the SQLite tables its files create", () => {
    for (const row of objectRows()) {
      const created = row.files
        .flatMap((f) => [...read(f).matchAll(/CREATE TABLE IF NOT EXISTS (\w+)/g)].map((m) => m[1] as string))
        .sort();
      expect(row.tables, `${row.name} (${row.files.join(", ")})`).toEqual(created);
    }
    expect(objectRows().find((r) => r.name === "JobEventsObject")?.tables).toContain("trusted_generations");
  });

  it("the reading order counts the triggers drizzle/*.sql creates", () => {
    const sql = readdirSync(join(ROOT, "drizzle"))
      .filter((f) => f.endsWith(".sql"))
      .map((f) => read(join("drizzle", f)).replace(/--.*$/gm, ""))
      .join("\n");
    const triggers = (sql.match(/CREATE TRIGGER/g) ?? []).length - (sql.match(/DROP TRIGGER/g) ?? []).length;
    expect(triggers).toBeGreaterThan(0);
    expect(namedCount(architecture, /`drizzle\/\*\.sql` for the (\w+) triggers/)).toBe(triggers);
  });
});

describe("tools/README.md against tools/", () => {
  const readme = read("tools/README.md");
  const named = new Set([...readme.matchAll(/`([\w./-]+\.(?:ts|json))`/g)].map((m) => m[1] as string));

  it("names every file under tools/ by its path there", () => {
    const files = walk("tools").filter((f) => f !== "README.md");
    expect(files.length).toBeGreaterThan(10);
    expect(files.filter((f) => !named.has(f))).toEqual([]);
  });

  it("every file its tables list first in a row exists", () => {
    const listed = readme
      .split("\n")
      .filter((l) => l.startsWith("| `"))
      .flatMap((l) => [...(l.split(" | ")[0] as string).matchAll(/`([\w./-]+\.ts)`/g)].map((m) => m[1] as string));
    expect(listed.length).toBeGreaterThan(10);
    const files = new Set(walk("tools"));
    expect(listed.filter((f) => !files.has(f))).toEqual([]);
  });

  it("every bench takes its flags through the harness: it calls startBench and reads no process.argv itself", () => {
    const benches = walk("tools/bench").filter(
      (f) => !f.includes(".test.") && f !== "harness.ts" && f !== "host-gateway.ts",
    );
    expect(benches.length).toBeGreaterThan(10);
    const source = (f: string) => read(join("tools/bench", f));
    expect(benches.filter((f) => !/\bstartBench\(/.test(source(f)))).toEqual([]);
    expect(benches.filter((f) => /process\.argv/.test(source(f)))).toEqual([]);
  });

  it("no entry file sits beside a folder of its name (`x.ts` and `x/`): a program's entry is its folder's main.ts", () => {
    const files = walk("tools");
    const folders = new Set(
      files.flatMap((f) =>
        f
          .split("/")
          .slice(0, -1)
          .map((_, i, p) => p.slice(0, i + 1).join("/")),
      ),
    );
    expect(folders.size).toBeGreaterThan(3);
    expect(files.filter((f) => folders.has(f.replace(/\.ts$/, "")))).toEqual([]);
  });
});

describe("heartbeat defaults", () => {
  it("the lease store's default heartbeat is the hosts' default HOST_HEARTBEAT_MS", () => {
    // Building a store sends nothing: the client only needs to exist.
    const redis = createRedisClient({ url: "http://127.0.0.1:1", token: "unused" });
    const store = createLeaseStore(redis, { acquire: "", renew: "", release: "", settle: "" });
    expect(store.heartbeatIntervalMs).toBe(hostConfigFromEnv(MINIMAL_HOST_ENV).heartbeatMs);
    expect(store.leaseTimeoutMs).toBe(3 * store.heartbeatIntervalMs);
  });
});

/** The text of one `## ` section of architecture.md, up to the next. */
function section(title: string): string {
  const start = architecture.indexOf(`\n## ${title}\n`);
  expect(start, `## ${title}`).toBeGreaterThan(-1);
  const end = architecture.indexOf("\n## ", start + 1);
  return architecture.slice(start, end === -1 ? undefined : end);
}

/** Backticked repository paths in a text: a known top folder, then a file with an extension or a folder. */
function namedPaths(text: string): string[] {
  const tops = "src|workers|sandbox-host|tools|test|docs|drizzle|console|examples|deploy";
  const re = new RegExp(String.raw`\x60((?:${tops})/[\w./-]*)\x60`, "g");
  return [...new Set([...text.matchAll(re)].map((m) => m[1] as string))].filter(
    (p) => p.endsWith("/") || /\.\w+$/.test(p),
  );
}

function exists(path: string): boolean {
  try {
    statSync(join(ROOT, path));
    return true;
  } catch {
    return false;
  }
}

/** Every identifier in the code the runtime runs (not the tools' or the tests'). */
const PRODUCT_NAMES = new Set(
  ["src", "workers", "sandbox-host", "drizzle"]
    .flatMap((dir) =>
      walk(dir)
        .filter((f) => /\.(ts|sql|lua)$/.test(f))
        .map((f) => read(join(dir, f))),
    )
    .flatMap((text) => text.match(/[A-Za-z_]\w*/g) ?? []),
);

/**
 * The code names a text gives, in backticks or in a drawing (a fenced block): camelCase,
 * PascalCase of two words or more, CONSTANT_CASE (a prefix such as `HOST_WEBHOOK_*` is not one).
 */
function codeNames(text: string): string[] {
  const fenced = /```[\s\S]*?```/g;
  const spans = [
    ...[...text.replace(fenced, "").matchAll(/`([^`]+)`/g)].map((m) => m[1] as string),
    ...(text.match(fenced) ?? []),
  ];
  const NAME = /^(?:[a-z]+[A-Z]\w*|[A-Z][a-z0-9]+[A-Z]\w*|[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9])$/;
  return [...new Set(spans.flatMap((span) => span.match(/[A-Za-z_]\w*/g) ?? []).filter((n) => NAME.test(n)))];
}

describe("docs/architecture.md's tables against the tree", () => {
  const tables = ["Reading order", "Fact → its one home", "Known duplicates"];

  it.each(tables)("every path %s names exists", (title) => {
    const paths = namedPaths(section(title));
    expect(paths.length).toBeGreaterThan(3);
    expect(paths.filter((p) => !exists(p))).toEqual([]);
  });

  it("the checker finds a missing path", () => {
    expect(namedPaths("see `src/db/nope.ts` and `workers/cron/` and `x/y.ts`")).toEqual([
      "src/db/nope.ts",
      "workers/cron/",
    ]);
    expect(exists("src/db/nope.ts")).toBe(false);
    expect(exists("workers/cron/")).toBe(true);
  });

  it.each([...tables, "The three identities"])("every code name %s gives is in the product code", (title) => {
    const names = codeNames(section(title));
    expect(names.length).toBeGreaterThan(3);
    expect(names.filter((n) => !PRODUCT_NAMES.has(n))).toEqual([]);
  });

  it("the name checker reads backticks and drawings, and finds a name the product code lacks", () => {
    const text =
      "calls `markStartedMany(db, ids)` and `HOST_WEBHOOK_*`, not `noSuchFunction`\n```\nreadRow(exec) → StartBatcher\n```";
    expect(codeNames(text).sort()).toEqual(["StartBatcher", "markStartedMany", "noSuchFunction", "readRow"]);
    expect(codeNames(text).filter((n) => !PRODUCT_NAMES.has(n))).toEqual(["noSuchFunction"]);
  });

  it("every name Known duplicates gives with its file, as `name` (`file`), is in that file", () => {
    const pairs = [...section("Known duplicates").matchAll(/`(\w+)` \(`([\w./-]+\.\w+)`/g)].map(
      (m) => [m[1], m[2]] as [string, string],
    );
    expect(pairs.length).toBeGreaterThan(3);
    const missing = pairs.filter(([name, file]) => !exists(file) || !new RegExp(`\\b${name}\\b`).test(read(file)));
    expect(missing).toEqual([]);
  });

  it("one row gives the Postgres tables' home, naming exactly the migrations that make or replace triggers", () => {
    const rows = section("Fact → its one home")
      .split("\n")
      .filter((l) => l.startsWith("| Postgres tables"));
    expect(rows).toHaveLength(1);
    const notes = (rows[0] as string).split(" | ")[2] as string;
    const named = [...notes.matchAll(/`(?:drizzle\/)?(\d{4})\b/g)].map((m) => m[1] as string).sort();
    const withTriggers = readdirSync(join(ROOT, "drizzle"))
      .filter((f) => f.endsWith(".sql"))
      .filter((f) =>
        /CREATE (?:OR REPLACE )?(?:TRIGGER|FUNCTION)|DROP TRIGGER/.test(
          read(join("drizzle", f)).replace(/--.*$/gm, ""),
        ),
      )
      .map((f) => f.slice(0, 4))
      .sort();
    expect(withTriggers.length).toBeGreaterThan(3);
    expect(named).toEqual(withTriggers);
  });
});

/** "issue" then a number, or "the issue's": a pointer to a tracker entry the repository does not carry. */
const ISSUE_POINTER = /\bissues?\s*#?\d+|\bthe issue's\b/i;

/** This file, whose pattern and examples say it on purpose. */
const SELF = "test/unit/docs-facts.test.ts";

/**
 * Applied migrations cannot be edited (tools/stack/migrate.ts refuses one whose content changed),
 * so these three keep their old comments; a new migration may not add one. May only shrink.
 */
const IMMUTABLE_WITH_ISSUE_POINTER = [
  "drizzle/0012_job_input_usage.sql",
  "drizzle/0014_admission.sql",
  "drizzle/0015_code_tools.sql",
];

describe("no issue numbers", () => {
  const files = [
    "README.md",
    "wrangler.toml",
    ...[
      "docs",
      "src",
      "workers",
      "sandbox-host",
      "tools",
      "test",
      "console/src",
      "examples",
      "drizzle",
      "deploy",
    ].flatMap((dir) =>
      walk(dir)
        .filter((f) => !f.includes("node_modules/") && /\.(ts|tsx|md|sql|toml|lua|ya?ml)$/.test(f))
        .map((f) => join(dir, f)),
    ),
  ];

  it("no doc or source file points at an issue number: it says why in words", () => {
    expect(files.length).toBeGreaterThan(300);
    const found = files
      .filter((f) => f !== SELF && !IMMUTABLE_WITH_ISSUE_POINTER.includes(f))
      .flatMap((f) =>
        read(f)
          .split("\n")
          .flatMap((line, i) => (ISSUE_POINTER.test(line) ? [`${f}:${i + 1}: ${line.trim()}`] : [])),
      );
    expect(found).toEqual([]);
    const stale = IMMUTABLE_WITH_ISSUE_POINTER.filter((f) => !ISSUE_POINTER.test(read(f)));
    expect(stale, "remove migrations that no longer say it").toEqual([]);
  });

  it("the pattern finds the pointers and not zod's issues", () => {
    for (const text of ["(issue 24)", "issue 27 item 6", "Issue #28", "the issue's size", "issues 3"])
      expect(ISSUE_POINTER.test(text), text).toBe(true);
    for (const text of ["error.issues.map((issue) => issue.path)", "each issue's own path", "a tissue 4"])
      expect(ISSUE_POINTER.test(text), text).toBe(false);
  });
});
