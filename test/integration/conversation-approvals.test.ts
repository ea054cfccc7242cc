/**
 * Approvals from a page (docs/api.md, POST /v1/conversations/{id}/jobs/{job_id}/approvals/{call_id}):
 * two jobs of two conversations wait on a gated code tool (HOST_TOOLS, the mock model). A page's
 * conversation-bound token decides its own chat's call through EarChatTransport.decide, and the
 * job completes with the tool's result; the other conversation's call is refused with 403 in
 * every way the token (or even the API key, under the wrong conversation) can address it, and
 * stays undecided.
 */
import { describe, expect, it } from "vitest";
import { EarChatTransport } from "../../src/ai-sdk/transport";
import { EarClient } from "../../src/client/client";
import { ApiClientError } from "../../src/client/http";
import type { JobView } from "../../src/contracts/job";
import { agentJobs, apiClient } from "../helpers/api";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

describe.skipIf(!canRun)("approvals decided from a page with its conversation-bound token", () => {
  const t = useStack({
    hosts: 1,
    mockModel: { ttftMs: 5, tokensPerS: 2000 },
    hostEnv: { HOST_TOOLS: "test/fixtures/code-tools/test-tools.ts" },
  });
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const { defineAgent, submit, waiting, finished, job } = agentJobs<JobView>(api, () => t.stack.modelName);

  const gatedJob = async (conversation: string, text: string) => {
    const script = { tool_calls: [{ name: "echo", args: { text } }], reply: `echoed ${text}` };
    const id = await submit("gated-echo", {
      conversation_id: conversation,
      input: { messages: [{ role: "user", content: `!mock ${JSON.stringify(script)}` }] },
    });
    const w = await waiting(id);
    return { id, callId: w.waiting_for?.call_id as string };
  };

  /** The refusal a call made, as `status code: message`. */
  const refusal = (call: Promise<unknown>) =>
    call.then(
      () => "decided",
      (err: unknown) => (err instanceof ApiClientError ? `${err.status} ${err.code}: ${err.message}` : String(err)),
    );

  it("decides its own conversation's call (the job completes), and is 403 for another conversation's", async () => {
    await defineAgent("gated-echo", { tools: [{ name: "echo", requires_approval: true }] });
    const own = await gatedJob("conv-own", "mine");
    const other = await gatedJob("conv-other", "theirs");

    const keyed = new EarClient({ baseUrl: t.stack.gatewayUrl, credential: t.stack.apiKey });
    const { token } = await keyed.createToken({ scope: "write", conversation_id: "conv-own" });
    const page = new EarClient({ baseUrl: t.stack.gatewayUrl, credential: token });
    const transport = new EarChatTransport({ baseUrl: t.stack.gatewayUrl, credential: token });

    // The other conversation's job, under the page's own conversation: the route refuses it.
    expect(
      await refusal(transport.decide("conv-own", { job_id: other.id, call_id: other.callId, decision: "approve" })),
    ).toMatch(new RegExp(`^403 forbidden: .*job ${other.id} is not in conversation conv-own`));
    // Under its own conversation, or by the job route: the token's binding refuses it.
    expect(
      await refusal(page.decideInConversation("conv-other", other.id, other.callId, { decision: "approve" })),
    ).toMatch(/^403 forbidden: .*bound to conversation conv-own/);
    expect(await refusal(page.decide(other.id, other.callId, { decision: "approve" }))).toMatch(
      /^403 forbidden: .*bound to conversation conv-own/,
    );
    // Not the token's privilege only: a key naming the wrong conversation is refused the same way.
    expect(await refusal(keyed.decideInConversation("conv-own", other.id, other.callId, { decision: "deny" }))).toMatch(
      /^403 forbidden: .*not in conversation conv-own/,
    );
    expect((await job(other.id)).state).toBe("waiting");

    // Its own call: decided, and the job resumes, runs the tool and completes.
    const decided = await transport.decide("conv-own", { job_id: own.id, call_id: own.callId, decision: "approve" });
    expect(decided).toMatchObject({ call_id: own.callId, decision: "approve", created: true });
    const repeat = await transport.decide("conv-own", { job_id: own.id, call_id: own.callId, decision: "approve" });
    expect(repeat.created).toBe(false);
    expect(await finished(own.id)).toMatchObject({ state: "completed", output: "echoed mine" });
    expect((await job(other.id)).state).toBe("waiting");

    // A job id that is no job: 404, as on the job route.
    expect(
      await refusal(
        transport.decide("conv-own", {
          job_id: "00000000-0000-4000-8000-00000000dead",
          call_id: "c",
          decision: "approve",
        }),
      ),
    ).toMatch(/^404 not_found/);
    transport.close();
  }, 120_000);
});
