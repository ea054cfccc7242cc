/**
 * `npm run host`: one more sandbox-host joined to the running dev stack (reads DEV_DIR/stack.json,
 * default .dev/stack.json). It gets the settings the stack gave its own hosts (stack.json's
 * `host_env`: HOST_TOOLS, MCP_ALLOWED_URLS, WEBHOOK_ALLOWED_URLS…), so a job it claims runs as it
 * would on them; a host variable set in this environment overrides (tools/stack/host-env.ts).
 * Runs in the foreground; Ctrl-C stops it (it drains its runs first).
 */
import { readFile, rename, writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { readableLogLine } from "./dev-logs";
import { addedHostEnv } from "./host-env";
import { spawnHost } from "./start";

const root = resolve(process.cwd());
const stackFile = resolve(root, process.env.DEV_DIR || ".dev", "stack.json");

interface StackFile {
  host_env?: Record<string, string>;
  host_secrets?: string[];
  hosts?: Array<{ id: string; metrics_url: string; pid?: number }>;
}

async function readStack(): Promise<StackFile> {
  try {
    return JSON.parse(await readFile(stackFile, "utf8")) as StackFile;
  } catch {
    throw new Error(`no running dev stack: start one with \`npm run dev\` first (${stackFile} not found)`);
  }
}

try {
  const stack = await readStack();
  if (!stack.host_env) throw new Error(`${stackFile} has no host_env; restart \`npm run dev\``);
  const { env, missingSecrets } = addedHostEnv(
    { host_env: stack.host_env, host_secrets: stack.host_secrets },
    process.env,
  );
  for (const name of missingSecrets) {
    console.log(`note: the stack's hosts were given ${name}; set it here too (it is not written to stack.json)`);
  }
  const host = await spawnHost(root, env, (_s, line) => {
    if (!line.startsWith('{"event":"host.ready"')) console.log(readableLogLine(line, "host"));
  });
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
