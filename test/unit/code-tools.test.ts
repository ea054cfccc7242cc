/**
 * The hosts' code tools (sandbox-host/code-tools/) with real tool threads: a module's tools
 * found and described, a duplicate name or a bad schema refused naming it (and the host process
 * exiting 2 for it), and every way a call can go: a result, bad arguments, a throw, out of
 * memory, past its bound (the slot freed only once the thread has exited), a cancel that the
 * tool sees on ctx.signal, one the tool ignores (its thread ended 1 s later), ctx's identity,
 * and a blocked tool thread leaving this thread's event loop free.
 */
import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CodeTools } from "../../sandbox-host/code-tools/code-tool-pool";
import {
  CODE_TOOL_CANCEL_GRACE_MS,
  CODE_TOOL_RESULT_MAX_CHARS,
  type CodeToolIdentity,
} from "../../sandbox-host/code-tools/tool-call";
import {
  CodeToolsError,
  describeTool,
  loadToolModules,
  toolModuleSpecifiers,
} from "../../sandbox-host/code-tools/tool-modules";
import type { Logger } from "../../sandbox-host/log";
import { sleep } from "../../src/domain/async";
import { MINIMAL_HOST_ENV } from "../helpers/host-env";
import { measureLoopGap } from "../helpers/loop-gap";

const ROOT = resolve(import.meta.dirname, "../..");
const FIXTURES = "test/fixtures/code-tools";
const [TEST_TOOLS, DUPLICATE, BAD_SCHEMA] = toolModuleSpecifiers(
  [`${FIXTURES}/test-tools.ts`, `./${FIXTURES}/duplicate-tools.ts`, `${ROOT}/${FIXTURES}/bad-schema-tools.ts`],
  ROOT,
) as [string, string, string];

const identity = (callId: string): CodeToolIdentity => ({
  job_id: "0f8e5c1a-0000-4000-8000-000000000001",
  execution_id: "0f8e5c1a-0000-4000-8000-0000000000e1",
  epoch: 7,
  tenant_id: "acme",
  idempotency_key: `0f8e5c1a-0000-4000-8000-000000000001:${callId}`,
});

describe("loading HOST_TOOLS modules", () => {
  it("finds every defineTool export and describes it with a JSON Schema input", async () => {
    const loaded = await loadToolModules([TEST_TOOLS]);
    expect([...loaded.keys()].sort()).toEqual(
      ["big", "boom", "echo", "hog", "ignore_cancel", "quit", "spin", "stuck", "wait_for_cancel", "whoami"].sort(),
    );
    const echo = describeTool(loaded.get("echo")!);
    expect(echo).toEqual({
      name: "echo",
      description: "Returns its text",
      input_schema: {
        type: "object",
        properties: { text: { type: "string" } },
        required: ["text"],
      },
      idempotent: false,
      requires_approval: false,
      timeout_ms: 30_000,
    });
    expect(describeTool(loaded.get("whoami")!).idempotent).toBe(true);
    expect(describeTool(loaded.get("spin")!).input_schema.required).toEqual(["ms"]);
  });

  it("refuses a name defined twice, naming the tool and both modules", async () => {
    const err = await loadToolModules([TEST_TOOLS, DUPLICATE]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CodeToolsError);
    expect((err as Error).message).toBe(
      `HOST_TOOLS: tool "echo" is defined twice (in ${TEST_TOOLS} and in ${DUPLICATE})`,
    );
  });

  it("refuses an input with no JSON Schema form, naming the tool", async () => {
    const loaded = await loadToolModules([BAD_SCHEMA]);
    expect(() => describeTool(loaded.get("when")!)).toThrow(
      /^HOST_TOOLS: tool "when" \(.*bad-schema-tools\.ts\) has a bad input schema: /,
    );
  });

  it("stops the host process with exit 2 naming the tool (duplicate, bad schema, missing module)", async () => {
    const runHost = (tools: string) =>
      new Promise<{ code: number | null; err: string }>((ok) => {
        const child = spawn(process.execPath, ["--import", "tsx", "sandbox-host/main.ts"], {
          cwd: ROOT,
          env: {
            PATH: process.env.PATH,
            ...MINIMAL_HOST_ENV,
            MODEL_BASE_URL: "http://127.0.0.1:9/v1",
            MODEL_API_KEY: "k",
            MODEL_NAME: "m",
            HOST_TOOLS: tools,
          },
          stdio: ["ignore", "ignore", "pipe"],
        });
        let err = "";
        child.stderr.on("data", (d: Buffer) => (err += d));
        child.once("exit", (code) => ok({ code, err }));
      });
    const [dup, bad, missing] = await Promise.all([
      runHost(`${FIXTURES}/test-tools.ts, ${FIXTURES}/duplicate-tools.ts`),
      runHost(`${FIXTURES}/bad-schema-tools.ts`),
      runHost("./no/such-tools.ts"),
    ]);
    expect(dup.code, dup.err).toBe(2);
    expect(dup.err).toMatch(/sandbox-host: HOST_TOOLS: tool "echo" is defined twice/);
    expect(bad.code, bad.err).toBe(2);
    expect(bad.err).toMatch(/sandbox-host: HOST_TOOLS: tool "when" .* has a bad input schema/);
    expect(missing.code, missing.err).toBe(2);
    expect(missing.err).toMatch(/sandbox-host: HOST_TOOLS: module .*no\/such-tools\.ts cannot be loaded/);
  }, 60_000);
});

describe("calls on tool threads", () => {
  const lines: Array<{ level: string; message: string; fields: Record<string, unknown> }> = [];
  const log = {
    info: (message: string, fields: Record<string, unknown> = {}) => lines.push({ level: "info", message, fields }),
    warn: (message: string, fields: Record<string, unknown> = {}) => lines.push({ level: "warn", message, fields }),
    error: (message: string, fields: Record<string, unknown> = {}) => lines.push({ level: "error", message, fields }),
    debug: () => {},
    child: () => log,
  } as unknown as Logger;
  let tools: CodeTools;
  const call = (name: string, args: unknown, callId: string, signal = new AbortController().signal) =>
    tools.call({ name, args, identity: identity(callId) }, signal);

  beforeAll(async () => {
    const loaded = await loadToolModules([TEST_TOOLS]);
    tools = new CodeTools({
      modules: [TEST_TOOLS],
      specs: [...loaded.values()].map(describeTool),
      concurrency: 2,
      memoryMb: 64,
      log,
    });
  });
  afterAll(() => tools.close({ timeoutMs: 0 }));

  it("returns the result as JSON, checks arguments against the schema, and refuses an unknown tool", async () => {
    expect(await call("echo", { text: "hi" }, "c1")).toEqual({ ok: true, json: '{"echoed":"hi"}', truncated: false });
    const bad = await call("echo", { text: 3 }, "c2");
    expect(bad).toMatchObject({ ok: false, code: "invalid_input" });
    expect((bad as { message: string }).message).toMatch(/^invalid arguments for echo: .*text/s);
    const badJson = await call("spin", { ms: "long" }, "c3");
    expect(badJson).toMatchObject({ ok: false, code: "invalid_input" });
    expect(await call("nope", {}, "c4")).toEqual({
      ok: false,
      code: "tool_unavailable",
      message: 'this host has no tool "nope"',
    });
  });

  it("gives the tool its ctx: the run's identity, a live signal, a log tagged with the job", async () => {
    lines.length = 0;
    const r = await call("whoami", {}, "call-42");
    expect(r.ok).toBe(true);
    expect(JSON.parse((r as { json: string }).json)).toEqual({
      ...identity("call-42"),
      aborted: false,
      log: "function",
    });
    expect(lines).toContainEqual({
      level: "info",
      message: "whoami called",
      fields: {
        marker: "w1",
        tool: "whoami",
        job_id: identity("x").job_id,
        execution_id: identity("x").execution_id,
      },
    });
  });

  it("a throw is a tool error with the tool's message; the next call works", async () => {
    expect(await call("boom", {}, "b1")).toEqual({
      ok: false,
      code: "tool_error",
      message: "RangeError: the order store is down",
    });
    expect((await call("echo", { text: "after" }, "b2")).ok).toBe(true);
  });

  it("a result past 64 KiB of JSON is cut on the tool thread, and says so", async () => {
    const r = await call("big", {}, "g1");
    expect(r.ok).toBe(true);
    const { json, truncated } = r as { json: string; truncated: boolean };
    expect(truncated).toBe(true);
    expect(json.length).toBe(CODE_TOOL_RESULT_MAX_CHARS);
    expect(json.startsWith('{"text":"xxx')).toBe(true);
  });

  it("a tool that ends its own thread is tool_crashed; the next call works", async () => {
    const r = await call("quit", {}, "q1");
    expect(r).toMatchObject({ ok: false, code: "tool_crashed" });
    expect((r as { message: string }).message).toMatch(/^tool "quit" ended its thread: .*7/);
    expect((await call("echo", { text: "after" }, "q2")).ok).toBe(true);
  });

  it("out of memory ends only its thread: tool_out_of_memory, and the next call works", async () => {
    const r = await call("hog", {}, "h1");
    expect(r).toMatchObject({ ok: false, code: "tool_out_of_memory" });
    expect((await call("echo", { text: "after" }, "h2")).ok).toBe(true);
  }, 60_000);

  it("past its bound the thread is terminated, and its slot is free only once the thread has exited", async () => {
    const t0 = performance.now();
    const r = await call("stuck", {}, "s1");
    const took = performance.now() - t0;
    expect(r).toEqual({
      ok: false,
      code: "tool_timeout",
      message: 'tool "stuck" ran past its 300 ms; its thread was ended',
    });
    expect(took).toBeGreaterThanOrEqual(300);
    // Settled from the thread's exit: nothing of it is still running.
    expect(tools.stats().inFlight).toBe(0);
    expect((await call("echo", { text: "after" }, "s2")).ok).toBe(true);
  }, 30_000);

  it("a cancel aborts ctx.signal: the tool sees it and returns", async () => {
    lines.length = 0;
    const abort = new AbortController();
    const pending = call("wait_for_cancel", {}, "w1", abort.signal);
    await sleep(300);
    abort.abort(new Error("cancelled"));
    expect(await pending).toEqual({ ok: false, code: "tool_cancelled", message: "the call was cancelled" });
    const t0 = performance.now();
    while (tools.stats().inFlight > 0 && performance.now() - t0 < 5000) await sleep(10);
    expect(tools.stats().inFlight).toBe(0);
    expect(lines.map((l) => l.message)).toContain("saw abort");
    // It returned by itself, well before the grace: its thread lives on.
    expect(performance.now() - t0).toBeLessThan(CODE_TOOL_CANCEL_GRACE_MS);
  });

  it("a call deaf to its cancel has its thread terminated 1 s later, and holds its slot until then", async () => {
    const abort = new AbortController();
    const pending = call("ignore_cancel", {}, "i1", abort.signal);
    await sleep(500);
    const t0 = performance.now();
    abort.abort(new Error("cancelled"));
    expect(await pending).toMatchObject({ ok: false, code: "tool_cancelled" });
    expect(tools.stats().inFlight).toBe(1);
    while (tools.stats().inFlight > 0 && performance.now() - t0 < 10_000) await sleep(10);
    const freedAfter = performance.now() - t0;
    expect(freedAfter).toBeGreaterThanOrEqual(CODE_TOOL_CANCEL_GRACE_MS - 5);
    expect(freedAfter).toBeLessThan(CODE_TOOL_CANCEL_GRACE_MS + 2000);
    expect((await call("echo", { text: "after" }, "i2")).ok).toBe(true);
  }, 30_000);

  it("a tool blocking its thread for 3 s leaves this event loop free", async () => {
    const { result, worstGapMs, tookMs } = await measureLoopGap(() => call("spin", { ms: 3000 }, "p1"));
    expect(result.ok).toBe(true);
    expect(tookMs).toBeGreaterThanOrEqual(3000);
    expect(worstGapMs).toBeLessThan(500);
  }, 30_000);
});
