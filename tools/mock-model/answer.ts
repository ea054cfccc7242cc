/**
 * Writes one planned answer in the OpenAI chat-completions wire format: SSE
 * (`data: {chat.completion.chunk}` … `data: [DONE]`) or a single `chat.completion` body.
 * Pacing is scheduled against absolute times (start + ttft + k / rate) so timer lateness does
 * not accumulate over a long answer; every wait is abortable so a client that goes away ends
 * the answer at once and leaves no timer behind.
 */
import { once } from "node:events";
import type { ServerResponse } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { type AnswerPlan, argumentFragments, joinTokens } from "./script";

type Answer = Extract<AnswerPlan, { kind: "answer" }>;

export interface AnswerContext {
  id: string;
  model: string;
  includeUsage: boolean;
  /** Aborted when the client disconnects. */
  signal: AbortSignal;
  /** Admission time (performance.now()). */
  startedAt: number;
  /** Told each usage the answer reports (the server's totals). */
  onUsage?(usage: { prompt_tokens: number; completion_tokens: number }): void;
}

export type AnswerOutcome = "completed" | "dropped";

/** Resolves when `at` (performance.now() clock) is reached; rejects with AbortError on abort. */
async function until(at: number, signal: AbortSignal): Promise<void> {
  const wait = at - performance.now();
  if (wait >= 1) await sleep(wait, undefined, { signal });
  else signal.throwIfAborted();
}

function intervalMs(plan: Answer): number {
  return plan.tokensPerS > 0 ? 1000 / plan.tokensPerS : 0;
}

function usageOf(plan: Answer, completionTokens: number) {
  return {
    prompt_tokens: plan.promptTokens,
    completion_tokens: completionTokens,
    total_tokens: plan.promptTokens + completionTokens,
  };
}

/** Ends the TCP connection mid-body once what was written is flushed: a provider dying mid-answer. */
function cutConnection(res: ServerResponse): void {
  if (res.socket) res.socket.end();
  else res.destroy();
}

async function write(res: ServerResponse, data: string, signal: AbortSignal): Promise<void> {
  if (!res.write(data)) await once(res, "drain", { signal });
}

export async function streamAnswer(res: ServerResponse, plan: Answer, ctx: AnswerContext): Promise<AnswerOutcome> {
  const created = Math.floor(Date.now() / 1000);
  const chunk = (delta: Record<string, unknown>, finishReason: string | null = null) =>
    `data: ${JSON.stringify({
      id: ctx.id,
      object: "chat.completion.chunk",
      created,
      model: ctx.model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    })}\n\n`;

  // Headers go out at admission, as a real provider's do; the first data chunk waits for ttft.
  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    connection: "keep-alive",
  });
  res.flushHeaders();

  // Text pieces are built as they go out; tool-call fragments are few and built up front.
  const { tokens } = plan;
  const toolPieces: Record<string, unknown>[] = [];
  plan.toolCalls.forEach((call, index) => {
    argumentFragments(call.argsJson).forEach((fragment, f) => {
      const head = tokens.length === 0 && toolPieces.length === 0 ? { role: "assistant", content: null } : {};
      toolPieces.push(
        f === 0
          ? {
              ...head,
              tool_calls: [
                { index, id: call.id, type: "function", function: { name: call.name, arguments: fragment } },
              ],
            }
          : { tool_calls: [{ index, function: { arguments: fragment } }] },
      );
    });
  });
  const count = Math.max(1, tokens.length + toolPieces.length);
  const pieceAt = (k: number): Record<string, unknown> => {
    if (k < tokens.length) return k === 0 ? { role: "assistant", content: tokens.at(0) } : { content: tokens.at(k) };
    return toolPieces[k - tokens.length] ?? { role: "assistant", content: "" };
  };

  const first = ctx.startedAt + plan.ttftMs;
  const step = intervalMs(plan);
  for (let k = 0; k < count; k++) {
    if (plan.dropAfterTokens !== null && k >= plan.dropAfterTokens) {
      cutConnection(res);
      return "dropped";
    }
    await until(first + k * step, ctx.signal);
    await write(res, chunk(pieceAt(k)), ctx.signal);
  }

  const finishReason = plan.toolCalls.length > 0 ? "tool_calls" : (plan.finishReason ?? "stop");
  let tail = chunk({}, finishReason);
  if (ctx.includeUsage && plan.usage) {
    ctx.onUsage?.(usageOf(plan, count));
    tail += `data: ${JSON.stringify({
      id: ctx.id,
      object: "chat.completion.chunk",
      created,
      model: ctx.model,
      choices: [],
      usage: usageOf(plan, count),
    })}\n\n`;
  }
  await write(res, `${tail}data: [DONE]\n\n`, ctx.signal);
  res.end();
  return "completed";
}

export async function respondAnswer(res: ServerResponse, plan: Answer, ctx: AnswerContext): Promise<AnswerOutcome> {
  const n = plan.tokens.length + plan.toolCalls.length;
  await until(ctx.startedAt + plan.ttftMs + Math.max(0, n - 1) * intervalMs(plan), ctx.signal);
  if (plan.dropAfterTokens !== null) {
    cutConnection(res);
    return "dropped";
  }
  const toolCalls = plan.toolCalls.map((c) => ({
    id: c.id,
    type: "function",
    function: { name: c.name, arguments: c.argsJson },
  }));
  const body = {
    id: ctx.id,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: ctx.model,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: toolCalls.length > 0 ? null : joinTokens(plan.tokens),
          refusal: null,
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        },
        logprobs: null,
        finish_reason: toolCalls.length > 0 ? "tool_calls" : (plan.finishReason ?? "stop"),
      },
    ],
    ...(plan.usage ? { usage: usageOf(plan, n) } : {}),
  };
  if (plan.usage) ctx.onUsage?.(usageOf(plan, n));
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
  return "completed";
}
