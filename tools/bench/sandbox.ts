/**
 * `npm run bench:sandbox`: sandbox create / exec / delete latency (p50/p95) at 1, 10 and 50
 * concurrent sandboxes on this machine, plus peak memory — this process's RSS, the Docker
 * daemons' (dockerd, containerd, shims) and the sandboxes' own cgroups. Also splits create into
 * its Engine API calls, to show where the time goes. Usage: `npm run bench:sandbox [levels] [image] [--json]`
 */
import { readdir, readFile } from "node:fs/promises";
import { connectDocker, type Docker } from "../../sandbox-host/sandbox/docker";
import { createSandboxManager, LABEL_HOST } from "../../sandbox-host/sandbox/manager";
import { sleep } from "../../src/domain/async";
import { ensureSandboxImage, LOCAL_SANDBOX_IMAGE } from "../build/sandbox-image";
import { dist, pct, startBench } from "./harness";

const bench = startBench({ usage: "npm run bench:sandbox [levels, e.g. 1,10,50] [image] [--json]", positionals: true });
const levels = (bench.positionals[0] ?? "1,10,50").split(",").map(Number);
const image = bench.positionals[1] ?? LOCAL_SANDBOX_IMAGE;
const hostId = `bench-${process.pid}`;

const mib = (b: number) => (b / 1024 / 1024).toFixed(0);

async function rssOf(names: Set<string>): Promise<number> {
  let total = 0;
  for (const pid of await readdir("/proc").catch(() => [] as string[])) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const status = await readFile(`/proc/${pid}/status`, "utf8");
      const name = /^Name:\s+(.+)$/m.exec(status)?.[1] ?? "";
      if (!names.has(name)) continue;
      total += Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0) * 1024;
    } catch {}
  }
  return total;
}

/** cgroup v1 and v2 layouts of Docker's cgroupfs driver. */
async function cgroupMemory(ids: string[]): Promise<number> {
  let total = 0;
  for (const id of ids) {
    for (const f of [
      `/sys/fs/cgroup/memory/docker/${id}/memory.usage_in_bytes`,
      `/sys/fs/cgroup/docker/${id}/memory.current`,
    ]) {
      const v = await readFile(f, "utf8").catch(() => null);
      if (v) {
        total += Number(v.trim());
        break;
      }
    }
  }
  return total;
}

/** Times every Engine call the manager makes, by method name. */
function timed(docker: Docker, calls: Map<string, number[]>): Docker {
  const wrap = <T extends object>(obj: T, prefix: string): T =>
    new Proxy(obj, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver);
        if (typeof v !== "function" || typeof prop !== "string") return v;
        return (...args: unknown[]) => {
          const t0 = performance.now();
          const out = v.apply(target, args);
          if (prop.startsWith("get")) return wrap(out as object, `${prop.slice(3).toLowerCase()}.`);
          if (out instanceof Promise) {
            return out.then((r) => {
              const k = `${prefix}${prop}`;
              calls.set(k, [...(calls.get(k) ?? []), performance.now() - t0]);
              return r && typeof r === "object" && prop === "createContainer" ? wrap(r as object, "container.") : r;
            });
          }
          return out;
        };
      },
    });
  return wrap(docker, "");
}

const docker = connectDocker();
await ensureSandboxImage({ docker, image });
const rows: Array<Array<string | number>> = [
  [
    "n",
    "create p50",
    "p95",
    "exec p50",
    "p95",
    "delete p50",
    "p95",
    "wall s create",
    "delete",
    "peak MiB host",
    "daemons",
    "sandboxes",
  ],
];
const breakdown: Array<Array<string | number>> = [["n", "Engine call", "calls", "p50 ms", "p95 ms"]];
const figures: Array<Record<string, unknown>> = [];
for (const n of levels) {
  const calls = new Map<string, number[]>();
  // n creations in flight at once: what the engine does under n, not the host's admission bound.
  const m = createSandboxManager({ docker: timed(docker, calls), hostId, image, createConcurrency: n });
  const runs = Array.from({ length: n }, (_, i) => `bench-${n}-${i}`);
  let peakHost = 0;
  let peakDaemons = 0;
  let peakSandboxes = 0;
  let ids: string[] = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peakHost = Math.max(peakHost, process.memoryUsage().rss);
      peakDaemons = Math.max(
        peakDaemons,
        await rssOf(new Set(["dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2"])),
      );
      peakSandboxes = Math.max(peakSandboxes, await cgroupMemory(ids));
      await sleep(200);
    }
  })();
  const create: number[] = [];
  const exec: number[] = [];
  const del: number[] = [];
  const t0 = performance.now();
  const sbs = await Promise.all(
    runs.map(async (r) => {
      const t = performance.now();
      const sb = await m.ensure(r);
      create.push(performance.now() - t);
      return sb;
    }),
  );
  const createWall = performance.now() - t0;
  ids = sbs.map((s) => s.containerId);
  await Promise.all(
    runs.map(async (r) => {
      for (let i = 0; i < 3; i++) {
        const t = performance.now();
        const res = await m.exec(r, { cmd: "echo hello > f.txt && cat f.txt && ls -la" });
        if (res.exitCode !== 0) throw new Error(`exec failed: ${res.stderr}`);
        exec.push(performance.now() - t);
      }
    }),
  );
  await sleep(400);
  const t1 = performance.now();
  await Promise.all(
    runs.map(async (r) => {
      const t = performance.now();
      await m.destroy(r);
      del.push(performance.now() - t);
    }),
  );
  const deleteWall = performance.now() - t1;
  sampling = false;
  await sampler;
  const left = await docker.listContainers({
    all: true,
    filters: JSON.stringify({ label: [`${LABEL_HOST}=${hostId}`] }),
  });
  if (left.length) throw new Error(`${left.length} containers left behind`);
  const f = (xs: number[]) => [pct(xs, 50).toFixed(0), pct(xs, 95).toFixed(0)];
  rows.push([
    n,
    ...f(create),
    ...f(exec),
    ...f(del),
    (createWall / 1000).toFixed(1),
    (deleteWall / 1000).toFixed(1),
    mib(peakHost),
    mib(peakDaemons),
    mib(peakSandboxes),
  ]);
  figures.push({
    n,
    create_ms: dist(create),
    exec_ms: dist(exec),
    delete_ms: dist(del),
    wall_s: { create: createWall / 1000, delete: deleteWall / 1000 },
    peak_bytes: { host: peakHost, daemons: peakDaemons, sandboxes: peakSandboxes },
  });
  for (const [k, xs] of [...calls].sort()) {
    if (xs.length >= n) breakdown.push([n, k, xs.length, pct(xs, 50).toFixed(0), pct(xs, 95).toFixed(0)]);
  }
}
bench.table(rows);
bench.say("\nEngine calls:");
bench.table(breakdown);
bench.say(bench.load());
bench.done({ image, levels: figures });
