/**
 * EarChatTransport in Node against the real stack, for what a page cannot easily make happen:
 * a stop() while the message still waits in the conversation's queue (busy: queue) behind a
 * running job. The message has no job yet, so the cancel is sent when its job frame comes, however
 * long the wait, and even though useChat cancels the stream's reader at once; the job then ends
 * cancelled, and the one it waited behind completes.
 */
import { describe, expect, it } from "vitest";
import { EarChatTransport, type EarUIMessage } from "../../src/ai-sdk/transport";
import type { JobView } from "../../src/contracts/job";
import { waitFor } from "../../tools/stack/services/ports";
import { apiClient } from "../helpers/api";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");
const slow = (tokens: number, perS: number) => `!mock ${JSON.stringify({ tokens, tokens_per_s: perS })}`;
const user = (id: string, text: string): EarUIMessage => ({ id, role: "user", parts: [{ type: "text", text }] });

async function drain(stream: ReadableStream<unknown>): Promise<unknown[]> {
  const out: unknown[] = [];
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return out;
    out.push(value);
  }
}

describe.runIf(canRun && typeof WebSocket === "function")("EarChatTransport against the stack", () => {
  const t = useStack({ hosts: 1 });

  it("stop() of a queued message cancels its job when it is submitted, after the running one completes", async () => {
    const api = apiClient(t.stack.gatewayUrl, t.stack.apiKey);
    const conversation = `c-transport-${process.pid}`;
    const minted = await api.call<{ token: string }>("POST", "/v1/tokens", {
      scope: "write",
      conversation_id: conversation,
    });
    expect(minted.status).toBe(201);
    const transport = new EarChatTransport({ baseUrl: t.stack.gatewayUrl, credential: minted.body.token });
    const send = (id: string, text: string, abortSignal?: AbortSignal) =>
      transport.sendMessages({
        trigger: "submit-message",
        chatId: conversation,
        messageId: undefined,
        messages: [user(id, text)],
        abortSignal,
      });
    // 7 s of answer: longer than the transport's wait for a cancel's answer (5 s).
    const first = drain(await send("m-first", slow(70, 10)));
    const stop = new AbortController();
    const second = await send("m-second", slow(31, 10), stop.signal);
    // What useChat's stop() does: abort the request, and cancel the reader of its stream.
    stop.abort();
    await second.cancel();
    const firstChunks = await first;
    expect(firstChunks.at(-1)).toMatchObject({ type: "finish", messageMetadata: { state: "completed" } });

    type Turn = { role: string; content: string; job_id: string };
    const queued = await waitFor(
      "the queued message to become a job",
      async () => {
        const r = await api.call<{ messages: Turn[] }>("GET", `/v1/conversations/${conversation}/messages`);
        return r.body.messages.find((m) => m.role === "user" && m.content === slow(31, 10)) ?? null;
      },
      { timeoutMs: 20_000, intervalMs: 100 },
    );
    const ended = await waitFor(
      "the queued job to end",
      async () => {
        const j = (await api.call<{ job: JobView }>("GET", `/v1/jobs/${queued.job_id}`)).body.job;
        return ["queued", "running"].includes(j.state) ? null : j;
      },
      { timeoutMs: 20_000, intervalMs: 100 },
    );
    expect(ended.state).toBe("cancelled");
    transport.close();
  }, 60_000);
});
