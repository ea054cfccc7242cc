/**
 * Where `npm run dev` puts what the gateway and the hosts log: files under DEV_DIR/logs, one line
 * per log line, made readable (`12:00:01.234 info  [host-1] job started job_id=…`). Files and
 * not the terminal: under load the hosts write several lines per job, which scrolled the stack's
 * own messages away and made the terminal unusable; `tail -f` a file when you want them.
 */
import { createWriteStream, type WriteStream } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";

export interface DevLogs {
  /** The files, by what writes them. */
  paths: { gateway: string; hosts: string };
  /** One line from a process of the stack ("gateway" or "host"); false when it is not one of theirs. */
  write(source: string, line: string): boolean;
  close(): Promise<void>;
}

/**
 * A structured line (`{"ts","level","msg",…}` from sandbox-host/log.ts, `{"msg",…}` from
 * workers/log.ts) as one readable line; any other line as it is. `label` names the process.
 */
export function readableLogLine(line: string, label: string, now = new Date()): string {
  let rec: Record<string, unknown> | null = null;
  if (line.startsWith("{")) {
    try {
      const parsed = JSON.parse(line) as unknown;
      if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) rec = parsed as Record<string, unknown>;
    } catch {}
  }
  if (!rec) return `${clock(now)} ${"".padEnd(5)} [${label}] ${line}`;
  // The host's `host.ready` line (stdout) has an event and no msg.
  const { ts, level, msg, event, host: _host, ...fields } = rec;
  const at = typeof ts === "string" && !Number.isNaN(Date.parse(ts)) ? new Date(ts) : now;
  const rest = Object.entries(fields).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`);
  return [`${clock(at)} ${String(level ?? "info").padEnd(5)} [${label}] ${String(msg ?? event ?? "")}`, ...rest].join(
    " ",
  );
}

function clock(d: Date): string {
  return d.toISOString().slice(11, 23);
}

/** Open (append to) DEV_DIR/logs/gateway.log and hosts.log. */
export async function openDevLogs(devDir: string): Promise<DevLogs> {
  const dir = join(devDir, "logs");
  await mkdir(dir, { recursive: true });
  const paths = { gateway: join(dir, "gateway.log"), hosts: join(dir, "hosts.log") };
  const streams: Record<"gateway" | "hosts", WriteStream> = {
    gateway: createWriteStream(paths.gateway, { flags: "a" }),
    hosts: createWriteStream(paths.hosts, { flags: "a" }),
  };
  for (const s of Object.values(streams)) s.on("error", () => {}); // a full disk must not stop the stack
  // host-1, host-2… in the order the hosts first speak (the stack starts them one after another).
  const labels = new Map<string, string>();
  const hostLabel = (line: string): string => {
    const id = /"host":"([^"]+)"/.exec(line)?.[1] ?? /^\{"event":"host\.ready","id":"([^"]+)"/.exec(line)?.[1];
    if (!id) return "host";
    let label = labels.get(id);
    if (!label) {
      label = `host-${labels.size + 1}`;
      labels.set(id, label);
    }
    return label;
  };
  return {
    paths,
    write(source, line) {
      if (source === "gateway") streams.gateway.write(`${readableLogLine(line, "gateway")}\n`);
      else if (source === "host") streams.hosts.write(`${readableLogLine(line, hostLabel(line))}\n`);
      else return false;
      return true;
    },
    close: () =>
      Promise.all(Object.values(streams).map((s) => new Promise<void>((r) => s.end(() => r())))).then(() => {}),
  };
}
