/**
 * One of the stack's own Node services (the pg bridge, the Upstash REST bridge, the mock model)
 * run as a child process of its own, so its CPU is not the launching process's: `npm run load
 * --self-start` drives its clients from the process that starts the stack, and with the services
 * inside it the clients and the services shared one event loop.
 *
 * The child runs in its own process group (stopped as a group, SIGKILLed if the launcher exits
 * without stopping it: services/process.ts) and reports readiness by printing a line the caller
 * recognises; until then its output is kept, and an exit or a timeout before that line rejects
 * with the service's name and the tail of what it printed.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { killOnExit, stopProcessGroup } from "./process";

export interface ChildServiceOptions {
  /** For messages: "pg bridge", "upstash bridge", "mock model". */
  name: string;
  cwd: string;
  /** Node arguments, e.g. `["--import", "tsx", "tools/bridges/pg-proxy/main.ts", "--port", "0"]`. */
  argv: string[];
  env?: Record<string, string>;
  /** Variables of this process the child must not inherit, by prefix (e.g. `MOCK_MODEL_`). */
  dropEnv?: string[];
  /** The value the service's ready line carries (its URL), or null for any other line. */
  ready(line: string): string | null;
  readyTimeoutMs?: number;
  stopGraceMs?: number;
  log?: (line: string) => void;
}

export interface ChildService {
  /** What `ready` returned for the ready line. */
  value: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

export async function startChildService(opts: ChildServiceOptions): Promise<ChildService> {
  const timeoutMs = opts.readyTimeoutMs ?? 30_000;
  const child = spawn(process.execPath, opts.argv, {
    cwd: opts.cwd,
    env: {
      ...Object.fromEntries(
        Object.entries(process.env).filter(([k]) => !opts.dropEnv?.some((prefix) => k.startsWith(prefix))),
      ),
      ...opts.env,
    },
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  killOnExit(child, { group: true });
  const tail: string[] = [];
  const keep = (line: string) => {
    tail.push(line);
    if (tail.length > 30) tail.shift();
    opts.log?.(line);
  };
  const said = () => (tail.length ? `; it printed:\n${tail.join("\n")}` : "; it printed nothing");
  createInterface({ input: child.stderr as NodeJS.ReadableStream }).on("line", keep);
  const value = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${opts.name} did not report ready in ${timeoutMs / 1000} s${said()}`)),
      timeoutMs,
    );
    let found = false;
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on("line", (line) => {
      const v = found ? null : opts.ready(line);
      // The ready line is the caller's to report (it knows what the value means).
      if (v === null) keep(line);
      else {
        found = true;
        clearTimeout(timer);
        resolve(v);
      }
    });
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(new Error(`${opts.name} could not be started: ${err.message}`));
    });
    child.once("exit", (code, sig) => {
      clearTimeout(timer);
      // After the ready line this rejects nothing (the promise is settled).
      reject(new Error(`${opts.name} exited (${code ?? sig}) before it was ready${said()}`));
    });
  }).catch(async (err) => {
    await stopProcessGroup(child, 1000);
    throw err;
  });
  const grace = opts.stopGraceMs ?? 5_000;
  return { value, process: child, stop: () => stopProcessGroup(child, grace) };
}
