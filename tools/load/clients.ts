/**
 * The load tool's client processes (`--client-procs N`): N forked `client.ts` processes, started
 * once and reused by every step, each running its share of a step's virtual users. Why: at 1,000
 * VUs one Node process parses every SSE stream of the step on one event loop, and a late loop
 * makes every latency it measures late too; spread over processes, each loop's delay is printed
 * beside the step (docs/capacity.md, "Is the load tool the bottleneck?").
 */
import { type ChildProcess, fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { ClientMessage, RunShare } from "./client";
import type { LoopDelay, RunRecord } from "./types";

const ENTRY = fileURLToPath(new URL("./client.ts", import.meta.url));

/** Default client processes for a step of `n` VUs: one below 300, then one per 250 VUs (at most 8). */
export function autoClientProcs(n: number): number {
  return n < 300 ? 1 : Math.min(8, Math.ceil(n / 250));
}

/** VU numbers 0..n-1 dealt round-robin over `procs` shares. */
export function splitVus(n: number, procs: number): number[][] {
  const shares: number[][] = Array.from({ length: Math.max(1, procs) }, () => []);
  for (let vu = 0; vu < n; vu++) shares[vu % shares.length]?.push(vu);
  return shares.filter((s) => s.length > 0);
}

interface Child {
  proc: ChildProcess;
  pid: number;
  index: number;
}

export class ClientPool {
  private children: Child[] = [];

  constructor(private readonly cwd: string) {}

  pids(): Map<number, string> {
    return new Map(this.children.map((c) => [c.pid, `load client ${c.index}`]));
  }

  private async spawnOne(index: number): Promise<Child> {
    // tsx loads the TypeScript entry the same way the load tool itself is run.
    const proc = fork(ENTRY, [], {
      cwd: this.cwd,
      execArgv: ["--import", "tsx"],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    const pid = await new Promise<number>((resolve, reject) => {
      const onMsg = (m: ClientMessage) => {
        if (m.type === "ready") {
          proc.off("message", onMsg);
          resolve(m.pid);
        }
      };
      proc.on("message", onMsg);
      proc.once("exit", (code) => reject(new Error(`load client exited (${code}) before it was ready`)));
      proc.once("error", reject);
    });
    return { proc, pid, index };
  }

  /** At least `n` client processes running. */
  async ensure(n: number): Promise<void> {
    const add: Promise<Child>[] = [];
    for (let i = this.children.length; i < n; i++) add.push(this.spawnOne(i + 1));
    this.children.push(...(await Promise.all(add)));
  }

  /**
   * Runs one step's VUs over the first `shares.length` children. Every VU yields a record: one whose
   * client process died mid-step is a strict failure saying so.
   */
  async run(
    base: Omit<RunShare, "type" | "vus">,
    shares: number[][],
    onOpen: (vu: number) => void,
    onRecord: (r: RunRecord) => void,
    failed: (vu: number, why: string) => RunRecord,
  ): Promise<{ records: RunRecord[]; loops: LoopDelay[] }> {
    await this.ensure(shares.length);
    const records: RunRecord[] = [];
    const loops: LoopDelay[] = [];
    await Promise.all(
      shares.map(
        (vus, i) =>
          new Promise<void>((resolve) => {
            const child = this.children[i] as Child;
            const pending = new Set(vus);
            const finish = (why: string | null) => {
              child.proc.off("message", onMsg);
              child.proc.off("exit", onExit);
              if (why) for (const vu of pending) records.push(failed(vu, why));
              resolve();
            };
            const onMsg = (m: ClientMessage) => {
              if (m.type === "open") onOpen(m.vu);
              else if (m.type === "record") {
                pending.delete(m.record.vu);
                records.push(m.record);
                onRecord(m.record);
              } else if (m.type === "done") {
                loops.push({ proc: `load client ${child.index}`, pid: child.pid, vus: vus.length, ...m.loop });
                finish(null);
              }
            };
            const onExit = (code: number | null, sig: string | null) => {
              this.children = this.children.filter((c) => c !== child);
              finish(`load client ${child.index} (pid ${child.pid}) exited (${code ?? sig}) mid-step`);
            };
            child.proc.on("message", onMsg);
            child.proc.once("exit", onExit);
            child.proc.send({ type: "run", ...base, vus } satisfies RunShare);
          }),
      ),
    );
    records.sort((a, b) => a.vu - b.vu);
    loops.sort((a, b) => a.proc.localeCompare(b.proc, undefined, { numeric: true }));
    return { records, loops };
  }

  async close(): Promise<void> {
    await Promise.all(
      this.children.map(
        (c) =>
          new Promise<void>((resolve) => {
            if (c.proc.exitCode !== null || c.proc.signalCode !== null) return resolve();
            const t = setTimeout(() => c.proc.kill("SIGKILL"), 3000);
            c.proc.once("exit", () => {
              clearTimeout(t);
              resolve();
            });
            c.proc.send({ type: "exit" });
          }),
      ),
    );
    this.children = [];
  }
}
