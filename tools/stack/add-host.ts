/**
 * `npm run host`: one more sandbox-host joined to the running dev stack (reads .dev/stack.json).
 * Runs in the foreground; Ctrl-C stops it (it drains its runs first).
 */
import { readFile, rename, writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { spawnHost } from "./start";

const root = resolve(process.cwd());
const stackFile = resolve(root, ".dev/stack.json");

interface StackFile {
  host_env?: Record<string, string>;
  hosts?: Array<{ id: string; metrics_url: string; pid?: number }>;
}

async function readStack(): Promise<StackFile> {
  try {
    return JSON.parse(await readFile(stackFile, "utf8")) as StackFile;
  } catch {
    throw new Error("no running dev stack: start one with `npm run dev` first (.dev/stack.json not found)");
  }
}

try {
  const stack = await readStack();
  if (!stack.host_env) throw new Error(".dev/stack.json has no host_env; restart `npm run dev`");
  const env: Record<string, string> = { ...stack.host_env, HOST_METRICS_PORT: "0" };
  for (const k of [
    "MODEL_BASE_URL",
    "MODEL_API_KEY",
    "MODEL_NAME",
    "HOST_MAX_RUNS",
    "HOST_RESERVED_SLOTS",
    "HOST_ID",
  ]) {
    const v = process.env[k];
    if (v) env[k] = v;
  }
  const host = await spawnHost(root, env, (_s, line) => console.log(`[host] ${line}`));
  const latest = await readStack();
  latest.hosts = [...(latest.hosts ?? []), { id: host.id, metrics_url: host.metricsUrl, pid: host.process.pid }];
  const tmp = `${stackFile}.${process.pid}`;
  await writeFile(tmp, `${JSON.stringify(latest, null, 2)}\n`, { mode: 0o600 });
  await rename(tmp, stackFile);
  console.log(`sandbox-host ${host.id} joined the stack; metrics at ${host.metricsUrl}. Ctrl-C stops it.`);
  const stop = async () => {
    await host.stop();
    process.exit(0);
  };
  process.on("SIGINT", () => void stop());
  process.on("SIGTERM", () => void stop());
  host.process.once("exit", (c, s) => {
    console.log(`sandbox-host exited (${c ?? s})`);
    process.exit(c ?? 1);
  });
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(1);
}
