/**
 * `npm run bench:run-path`: how long the host's event loop is held by the
 * data handling a run does itself, at the largest sizes the tool limits allow. It decides whether
 * a step belongs in the offload pool (docs/architecture.md, "The offload pool and the run path"):
 * a step is worth a thread hop only when it takes well over what posting its input to a thread
 * costs, since that copy happens on the loop too. Median and max of 7 runs after one warm-up.
 */
import { performance } from "node:perf_hooks";
import { MessageChannel } from "node:worker_threads";
import { DEFAULT_OUTPUT_CAP_BYTES, DEFAULT_READ_MAX_BYTES, MAX_WRITE_BYTES } from "../../sandbox-host/sandbox/manager";
import { type ToolResult, toolResultContent } from "../../sandbox-host/sandbox/tools";
import { pct, startBench } from "./harness";

const bench = startBench({ usage: "npm run bench:run-path [-- --json]" });
const RUNS = 7;
const rows: Array<{ step: string; median_ms: number; max_ms: number }> = [];

function time(label: string, fn: () => unknown): void {
  fn();
  const xs: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    fn();
    xs.push(performance.now() - t0);
  }
  rows.push({ step: label, median_ms: pct(xs, 50), max_ms: pct(xs, 100) });
}

// Text with characters JSON must escape (quotes, backslashes, newlines): the dearer case.
const text = Buffer.alloc(DEFAULT_READ_MAX_BYTES);
for (let i = 0; i < text.length; i++) text[i] = 'abc"\\\n xyz'.charCodeAt(i % 10);
const binary = Buffer.alloc(DEFAULT_READ_MAX_BYTES);
for (let i = 0; i < binary.length; i++) binary[i] = (i * 7919) & 255;

// The same steps as the read_file case of sandbox-host/sandbox/tools.ts, then the run's two uses
// of the result: the tool message for the model and the tool.result event the outbox serializes.
function readFileChain(data: Buffer): void {
  let encoding: "utf8" | "base64" = "utf8";
  let content = "";
  try {
    content = new TextDecoder("utf-8", { fatal: true }).decode(data);
  } catch {
    encoding = "base64";
    content = data.toString("base64");
  }
  const output = { path: "/workspace/f", size: data.length, encoding, content, truncated: false };
  const result: ToolResult = { ok: true, output };
  toolResultContent(result);
  JSON.stringify([{ type: "tool.result", data: { id: "call_1", ok: true, output } }]);
}

const mib = (n: number) => `${n / 1024 / 1024} MiB`;
time(`read_file ${mib(DEFAULT_READ_MAX_BYTES)} text: decode + tool message + event JSON`, () => readFileChain(text));
time(`read_file ${mib(DEFAULT_READ_MAX_BYTES)} binary: failed decode + base64 + JSON`, () => readFileChain(binary));
const shell = { exit_code: 0, stdout: text.toString("utf8", 0, DEFAULT_OUTPUT_CAP_BYTES), stderr: "", truncated: true };
time(`shell ${DEFAULT_OUTPUT_CAP_BYTES / 1024} KiB capped output: tool message JSON`, () =>
  toolResultContent({
    ok: true,
    output: { ...shell, timed_out: false, cancelled: false, sandbox_restarted: false },
  }),
);
const base64 = Buffer.alloc(MAX_WRITE_BYTES, 1).toString("base64");
time(`write_file ${mib(MAX_WRITE_BYTES)}: base64 content to bytes`, () => Buffer.from(base64, "base64"));
const { port1, port2 } = new MessageChannel();
port2.on("message", () => {});
time(`the same ${mib(MAX_WRITE_BYTES)} content posted to a thread (sender side)`, () => port1.postMessage(base64));
port1.close();

bench.table([
  ["step", "median ms", "max ms"],
  ...rows.map((r) => [r.step, r.median_ms.toFixed(2), r.max_ms.toFixed(2)]),
]);
bench.say(bench.load());
bench.done({ runs: RUNS, steps: rows });
