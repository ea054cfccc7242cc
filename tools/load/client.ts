/**
 * A load client process (`--client-procs N`): forked by the load tool, it runs the share of a
 * step's virtual users the parent hands it and sends every run's record back as the run ends,
 * with its own event-loop delay over the step. It samples nothing and judges nothing: the parent
 * aggregates the records exactly as it does for the VUs it runs itself.
 *
 * Messages (IPC, JSON): parent → child `run` (one step's share) and `exit`; child → parent
 * `ready`, `open` (a VU's first event, for the progress bar), `record` (a finished run) and `done`.
 */
import { type LoopFigures, startLoopDelay } from "./loop-delay";
import type { ModelScript, RunRecord, Scenario } from "./types";
import { runVu } from "./vu";

export interface RunShare {
  type: "run";
  gatewayUrl: string;
  apiKey: string;
  script: ModelScript;
  runTimeoutMs: number;
  runId: string;
  step: number;
  scenario: Scenario;
  vus: number[];
}

export type ClientMessage =
  | { type: "ready"; pid: number }
  | { type: "open"; vu: number }
  | { type: "record"; record: RunRecord }
  | { type: "done"; loop: LoopFigures };

const send = (m: ClientMessage) =>
  new Promise<void>((resolve, reject) => {
    process.send?.(m, undefined, undefined, (err) => (err ? reject(err) : resolve()));
  });

async function runShare(share: RunShare): Promise<void> {
  const loop = startLoopDelay();
  const target = {
    gatewayUrl: share.gatewayUrl,
    apiKey: share.apiKey,
    databaseUrl: null,
    redisUrl: null,
    hosts: () => [],
    source: "parent",
  };
  const opened = new Set<number>();
  await Promise.all(
    share.vus.map((vu) =>
      runVu(
        {
          target,
          script: share.script,
          runTimeoutMs: share.runTimeoutMs,
          runId: share.runId,
          step: share.step,
          onEvent: (v) => {
            if (opened.has(v)) return;
            opened.add(v);
            void send({ type: "open", vu: v });
          },
        },
        vu,
        share.scenario,
      ).then((record) => send({ type: "record", record })),
    ),
  );
  await send({ type: "done", loop: loop.stop() });
}

process.on("message", (m: RunShare | { type: "exit" }) => {
  if (m.type === "exit") process.exit(0);
  if (m.type === "run") {
    runShare(m).catch((err: unknown) => {
      console.error(`load client ${process.pid}: ${err instanceof Error ? err.stack : String(err)}`);
      process.exit(1);
    });
  }
});
// The parent is gone: nothing to report to.
process.on("disconnect", () => process.exit(0));
void send({ type: "ready", pid: process.pid });
