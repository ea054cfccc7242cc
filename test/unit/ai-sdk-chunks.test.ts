/**
 * A job's events as UI message chunks, read back by the AI SDK's own reader (readUIMessageStream,
 * what useChat runs): the message a page shows has the last turn's text as its last text part,
 * tool calls with their results, approvals decided in place, and the job's state and latency.
 */
import { readUIMessageStream } from "ai";
import { describe, expect, it } from "vitest";
import { AnswerChunks, type EarChunk, type EarUIMessage } from "../../src/ai-sdk/chunks";
import type { EventEnvelope } from "../../src/contracts/events";

const JOB = "11111111-2222-4333-8444-555555555555";
let seq = 0;
const ev = (type: string, payload: Record<string, unknown> = {}): EventEnvelope =>
  ({
    job_id: JOB,
    execution_id: "e1",
    epoch: 1,
    seq: ++seq,
    type,
    payload,
    ts: `2026-12-01T00:00:0${seq % 10}.000Z`,
  }) as EventEnvelope;

async function render(chunks: EarChunk[], errors: unknown[] = []): Promise<EarUIMessage> {
  const stream = new ReadableStream<EarChunk>({
    start(c) {
      for (const x of chunks) c.enqueue(x);
      c.close();
    },
  });
  let last: EarUIMessage | undefined;
  for await (const m of readUIMessageStream<EarUIMessage>({ stream, onError: (e) => errors.push(e) })) last = m;
  if (!last) throw new Error("no message");
  return last;
}

const latency = {
  dispatch_latency_ms: 5,
  preparation_latency_ms: 1,
  model_first_output_latency_ms: 20,
  first_output_latency_ms: 26,
  total_latency_ms: 90,
};

describe("AnswerChunks", () => {
  it("a tool-calling run: text per turn, the tool part with its output, an approval decided in place, then finish", async () => {
    const a = new AnswerChunks(JOB);
    const out: EarChunk[] = [a.start()];
    for (const e of [
      ev("run.started"),
      ev("run.prepared"),
      ev("model.turn", { turn: 1, reason: "start" }),
      ev("model.delta", { text: "Let me " }),
      ev("model.delta", { text: "look." }),
      ev("tool.call", { id: "c1", name: "shell", args: { command: "ls" } }),
      ev("tool.approval_requested", {
        call_id: "c1",
        tool: "shell",
        arguments: { command: "ls" },
        deadline_at: "2026-12-02T00:00:00.000Z",
      }),
      ev("run.suspended", { waiting_for: { kind: "approval", call_id: "c1", tool: "shell" } }),
      ev("run.resumed", { call_id: "c1", decision: "approve", by: "api", waited_ms: 10 }),
      ev("tool.result", { id: "c1", ok: true, output: { exit_code: 0, stdout: "a\n" } }),
      ev("model.turn", { turn: 2, reason: "tool_results" }),
      ev("model.delta", { text: "Done: a" }),
      ev("run.completed", { output: "Done: a" }),
    ])
      out.push(...a.event(e));
    expect(a.ended).toBe("completed");
    out.push(...a.finish(latency));
    const m = await render(out);
    expect(m.id).toBe(JOB);
    const texts = m.parts.filter((p) => p.type === "text").map((p) => (p as { text: string }).text);
    expect(texts).toEqual(["Let me look.", "Done: a"]);
    const tool = m.parts.find((p) => p.type === "dynamic-tool") as { toolName: string; state: string; output: unknown };
    expect(tool).toMatchObject({
      toolName: "shell",
      state: "output-available",
      output: { exit_code: 0, stdout: "a\n" },
    });
    const approvals = m.parts.filter((p) => p.type === "data-approval");
    expect(approvals).toHaveLength(1); // replaced in place, not appended
    expect(approvals[0]).toMatchObject({ data: { call_id: "c1", decision: "approve", decided_by: "api" } });
    const timing = m.parts.filter((p) => p.type === "data-timing");
    expect(timing).toHaveLength(1);
    expect(timing[0]).toMatchObject({
      data: { latency, finished_at: expect.any(String), first_output_at: expect.any(String) },
    });
    expect(m.metadata).toEqual({ job_id: JOB, state: "completed", latency });
  });

  it("a failed run ends in an error chunk, naming the job's error", async () => {
    const a = new AnswerChunks(JOB);
    const out: EarChunk[] = [a.start(), ...a.event(ev("model.turn", { turn: 1, reason: "start" }))];
    out.push(...a.event(ev("run.failed", { error: { code: "provider_error", message: "upstream 500" } })));
    const errors: unknown[] = [];
    await render(out, errors);
    expect(errors.map(String)).toEqual(["Error: job failed: provider_error: upstream 500"]);
  });

  it("a cancelled run keeps its partial text and finishes with state cancelled", async () => {
    const a = new AnswerChunks(JOB);
    const out: EarChunk[] = [a.start()];
    for (const e of [
      ev("model.turn", { turn: 1, reason: "start" }),
      ev("model.delta", { text: "t1 t2" }),
      ev("run.cancelled", { output: "t1 t2" }),
    ])
      out.push(...a.event(e));
    out.push(...a.finish(null));
    const m = await render(out);
    expect(m.parts.filter((p) => p.type === "text").map((p) => (p as { text: string }).text)).toEqual(["t1 t2"]);
    expect(m.metadata).toEqual({ job_id: JOB, state: "cancelled", latency: null });
  });
});
