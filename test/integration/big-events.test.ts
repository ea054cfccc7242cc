/**
 * Tool results and answers bigger than the event path carries, end to end on the real stack
 * (gateway in workerd, Postgres, Redis, a host, a Docker sandbox, the mock model). Before, a 1 MiB
 * `read_file` (1.33 MiB of base64 in its `tool.result`) was over the ingest body limit: ingest
 * refused the batch for good, the outbox dropped the run's undelivered events, and the stream
 * ended with a projected `run.completed`, missing the big results, the next tool call and the
 * answer's deltas. Now a payload is cut to MAX_EVENT_PAYLOAD_BYTES and says so (`truncated`,
 * `original_bytes`), batches are bounded by bytes, and every event arrives.
 */
import { describe, expect, it } from "vitest";
import { MAX_EVENT_PAYLOAD_BYTES } from "../../src/contracts/events";
import { apiClient } from "../helpers/api";
import { requireDocker } from "../helpers/docker";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) && (await requireDocker()) !== null;

interface Ev {
  offset: number;
  type: string;
  seq: number;
  execution_id: string;
  payload: Record<string, unknown>;
}

const script = (s: unknown) => [{ role: "user", content: `!mock ${JSON.stringify(s)}` }];
const jsonBytes = (v: unknown) => Buffer.byteLength(JSON.stringify(v));

describe.skipIf(!canRun)("events bigger than the event path: cut and marked, and nothing after them lost", () => {
  // An answer bigger than the event path needs more than the default output bound
  // (MODEL_MAX_OUTPUT_TOKENS, 4,096 tokens), which would cut it first.
  const t = useStack({
    hosts: 1,
    mockModel: { ttftMs: 5, tokensPerS: 2000 },
    hostEnv: { MODEL_MAX_OUTPUT_TOKENS: "128000" },
  });
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const run = async (body: Record<string, unknown>) => {
    const r = await api().call<{ job: { id: string } }>("POST", "/v1/jobs", body);
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    const id = r.body.job.id;
    // The stream ends at the terminal event.
    const evs: Ev[] = (await api().events(id)).map((e) => ({
      offset: Number(e.id),
      type: e.event,
      ...JSON.parse(e.data),
    }));
    const job = (await api().call<{ job: { state: string; output: string | null } }>("GET", `/v1/jobs/${id}`)).body.job;
    return { id, evs, job };
  };
  /** Every event of the host's execution arrived: seq 1..n, offsets 1..n, nothing projected. */
  const complete = (evs: Ev[]) => {
    expect(evs.map((e) => e.offset)).toEqual(evs.map((_, i) => i + 1));
    expect(evs.map((e) => e.seq)).toEqual(evs.map((_, i) => i + 1));
    expect(evs.every((e) => e.payload.source === undefined)).toBe(true);
  };

  it("two 1 MiB read_file results arrive cut and marked, and the next tool call and the answer's deltas after them", async () => {
    const { evs, job } = await run({
      tools: ["shell", "read_file", "list_dir"],
      input: {
        messages: script({
          tool_calls: [
            { name: "shell", args: { command: "head -c 1048576 /dev/urandom > /workspace/big.bin" } },
            { name: "read_file", args: { path: "big.bin", encoding: "base64" } },
            // Not UTF-8: comes back as base64 too.
            { name: "read_file", args: { path: "big.bin" } },
            { name: "list_dir", args: {} },
          ],
          reply: "read it all",
        }),
      },
    });
    expect(job.state).toBe("completed");
    expect(job.output).toBe("read it all");
    complete(evs);
    const results = evs.filter((e) => e.type === "tool.result");
    expect(results).toHaveLength(4);
    for (const big of [results[1], results[2]]) {
      expect(big?.payload).toMatchObject({ ok: true, truncated: true });
      expect(big?.payload.original_bytes).toBeGreaterThan(1_398_000);
      expect(jsonBytes(big?.payload)).toBeLessThanOrEqual(MAX_EVENT_PAYLOAD_BYTES);
      // The cut keeps the output's shape and the start of its content.
      const output = big?.payload.output as { size: number; encoding: string; content: string };
      expect(output).toMatchObject({ size: 1_048_576, encoding: "base64" });
      expect(output.content.length).toBeGreaterThan(200_000);
    }
    expect(results[3]?.payload).toMatchObject({ ok: true });
    expect(results[3]?.payload.truncated).toBeUndefined();
    expect(evs.filter((e) => e.type === "tool.call").map((e) => e.payload.name)).toEqual([
      "shell",
      "read_file",
      "read_file",
      "list_dir",
    ]);
    const deltas = evs.filter((e) => e.type === "model.delta").map((e) => e.payload.text);
    expect(deltas.join("")).toBe("read it all");
    expect(evs.at(-1)).toMatchObject({ type: "run.completed", payload: { output: "read it all" } });
  }, 120_000);

  it("an answer bigger than an event: every delta arrives, and the host's run.completed carries its start, marked", async () => {
    const { evs, job } = await run({ input: { messages: script({ tokens: 100_000, tokens_per_s: 0 }) } });
    expect(job.state).toBe("completed");
    const output = job.output as string;
    expect(output.length).toBeGreaterThan(MAX_EVENT_PAYLOAD_BYTES);
    complete(evs);
    const deltas = evs.filter((e) => e.type === "model.delta").map((e) => e.payload.text as string);
    expect(deltas.join("")).toBe(output);
    const terminal = evs.at(-1) as Ev;
    expect(terminal.type).toBe("run.completed");
    expect(terminal.payload).toMatchObject({ truncated: true, original_bytes: jsonBytes({ output }) });
    expect(output.startsWith(terminal.payload.output as string)).toBe(true);
    expect(jsonBytes(terminal.payload)).toBeLessThanOrEqual(MAX_EVENT_PAYLOAD_BYTES);
  }, 120_000);
});
