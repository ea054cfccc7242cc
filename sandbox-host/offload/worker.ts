/**
 * Worker-thread entry of the offload pool: runs one task at a time from tasks.ts and reports
 * `done` only when the function has returned or thrown — that message is what frees the slot.
 */
import { parentPort } from "node:worker_threads";
import * as tasks from "./tasks";

export interface TaskRequest {
  id: number;
  task: string;
  args: unknown[];
}

export type TaskReply =
  | { ready: true }
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; name: string; message: string };

const registry = tasks as unknown as Record<string, (...args: unknown[]) => unknown>;

parentPort?.on("message", async (req: TaskRequest) => {
  let reply: TaskReply;
  try {
    const fn = registry[req.task];
    if (typeof fn !== "function") throw new Error(`unknown task "${req.task}"`);
    reply = { id: req.id, ok: true, value: await fn(...req.args) };
  } catch (err) {
    const e = err instanceof Error ? err : new Error(String(err));
    reply = { id: req.id, ok: false, name: e.name, message: e.message };
  }
  parentPort?.postMessage(reply);
});
// Loaded: from now on an exit is a task's doing, not a broken start.
parentPort?.postMessage({ ready: true } satisfies TaskReply);
