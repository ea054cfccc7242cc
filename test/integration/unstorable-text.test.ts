/**
 * Model output Postgres cannot store, end to end on the real stack (gateway in workerd, Postgres,
 * Redis, a host, the mock model): a NUL or a lone surrogate in an answer, in a tool call's
 * arguments, in an ask_user question and in a delegate's input. Before, each made the host's
 * write fail (`terminal write failed` / `suspend write failed`) and the job end `lost` with its
 * output gone. The rule (src/contracts/text.ts `storable`): each such code unit becomes U+FFFD,
 * in the row and in the stream alike, and the job ends with its real outcome.
 */
import { describe, expect, it } from "vitest";
import type { JobView } from "../../src/contracts/job";
import { agentJobs, apiClient } from "../helpers/api";
import { requireDocker } from "../helpers/docker";
import { requireBinary } from "../helpers/require";
import { FAST_LOSS_HOST_ENV, useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) && (await requireDocker()) !== null;

// JSON.stringify writes the NUL and the lone surrogate as \u escapes: what the gateway takes is plain ASCII.
const script = (s: unknown) => ({ input: { messages: [{ role: "user", content: `!mock ${JSON.stringify(s)}` }] } });
const NUL = "\u0000";
const LONE = "\ud800";
const R = "\uFFFD";

describe.skipIf(!canRun)("text Postgres cannot store, from a model: replaced with U+FFFD, never a lost job", () => {
  const t = useStack({ hosts: 1, mockModel: { ttftMs: 5, tokensPerS: 2000 }, hostEnv: FAST_LOSS_HOST_ENV });
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const jobs = agentJobs<JobView>(api, () => t.stack.modelName);
  const { defineAgent, submit, waiting } = jobs;
  const payloads = async (id: string) =>
    (await api().events(id)).map((e) => ({
      type: e.event,
      ...(JSON.parse(e.data) as { payload: Record<string, unknown> }),
    }));

  it("an answer: the job completes with the replaced text, and the host's run.completed and deltas say the same", async () => {
    await defineAgent("odd-answer", {});
    const id = await submit("odd-answer", script({ reply: `A${NUL}B ${LONE} C\u{1F600}` }));
    const done = await jobs.finished(id, 30_000);
    expect(done.state, JSON.stringify(done)).toBe("completed");
    expect(done.output).toBe(`A${R}B ${R} C\u{1F600}`);
    const evs = await payloads(id);
    const terminal = evs.at(-1);
    expect(terminal?.type).toBe("run.completed");
    // The host's own terminal event, not one the projector made from the row.
    expect(terminal?.payload).toEqual({ output: done.output });
    const deltas = evs.filter((e) => e.type === "model.delta").map((e) => e.payload.text);
    expect(deltas.join("")).toBe(done.output);
  }, 60_000);

  it("a tool call's arguments: the approval waits with the replaced arguments, in the row and the event", async () => {
    await defineAgent("odd-args", { tools: [{ name: "shell", requires_approval: true }] });
    const id = await submit(
      "odd-args",
      script({ tool_calls: [{ name: "shell", args: { command: `echo A${NUL}B` } }] }),
    );
    const w = await waiting(id);
    expect(w.waiting_for?.arguments).toEqual({ command: `echo A${R}B` });
    const r = await api().call("POST", `/v1/jobs/${id}/approvals/${w.waiting_for?.call_id}`, { decision: "deny" });
    expect(r.status).toBe(202);
    const done = await jobs.finished(id, 30_000);
    expect(done.state, JSON.stringify(done)).toBe("completed");
    // A waiting job's stream stays open: read it once the job is over.
    const requested = (await payloads(id)).find((e) => e.type === "tool.approval_requested");
    expect(requested?.payload.arguments).toEqual(w.waiting_for?.arguments);
  }, 60_000);

  it("an ask_user question: the job waits with the replaced question, and the answer completes it", async () => {
    await defineAgent("odd-asker", { ask_user: true });
    const id = await submit(
      "odd-asker",
      script({ tool_calls: [{ name: "ask_user", args: { question: `which${NUL} colour${LONE}?` } }] }),
    );
    const w = await waiting(id);
    expect(w.waiting_for?.question).toBe(`which${R} colour${R}?`);
    expect((await api().call("POST", `/v1/jobs/${id}/input`, { content: "ultramarine" })).status).toBe(202);
    const done = await jobs.finished(id, 30_000);
    expect(done.state, JSON.stringify(done)).toBe("completed");
    expect(done.output).toContain("ultramarine");
    const requested = (await payloads(id)).find((e) => e.type === "input.requested");
    expect(requested?.payload.question).toBe(w.waiting_for?.question);
  }, 60_000);

  it("a delegate's input: the child job is created with the replaced input and the parent completes", async () => {
    await defineAgent("odd-child", {});
    await defineAgent("odd-parent", { delegates: ["odd-child"] });
    const id = await submit(
      "odd-parent",
      script({ tool_calls: [{ name: "delegate_odd-child", args: { input: `task${NUL}one${LONE}` } }] }),
    );
    const done = await jobs.finished(id, 40_000);
    expect(done.state, JSON.stringify(done)).toBe("completed");
    const child = (
      await t.pool.query<{ input: { messages: Array<{ content: string }> }; state: string; output: string }>(
        "select input, state, output from jobs where parent_job_id = $1",
        [id],
      )
    ).rows;
    expect(child).toHaveLength(1);
    expect(child[0]?.input.messages[0]?.content).toBe(`task${R}one${R}`);
    expect(child[0]?.state).toBe("completed");
    // The child echoed its input; the parent's answer carries it.
    expect(done.output).toContain(`task${R}one${R}`);
  }, 60_000);
});
