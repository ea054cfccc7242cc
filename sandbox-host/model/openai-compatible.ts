/**
 * The production model adapter: any OpenAI-compatible chat-completions endpoint (OpenAI itself,
 * vLLM, a gateway, or tools/mock-model/main.ts locally), streamed through the `openai` library and
 * turned into ModelChunks. Text is passed on as it arrives; tool calls arrive as argument
 * fragments keyed by index and are only emitted whole, with parsed args, once the stream ended
 * with a finish reason — a half-received call must never reach a sandbox.
 *
 * Retries are off by default (maxRetries 0): the runtime retries under its own quota lease, and
 * a library retry would be a second provider request the quota never admitted.
 */
import OpenAI from "openai";
import type { ModelConfig } from "./provider-config";
import { retryAfterMs, safeProviderMessage } from "./provider-errors";
import { type ModelChunk, type ModelClient, ModelError, type ModelMessage, type ModelTurnRequest } from "./types";

/** Header wait and inter-chunk silence allowed when the config names none. */
const DEFAULT_TIMEOUT_MS = 120_000;

type WireMessage = OpenAI.Chat.Completions.ChatCompletionMessageParam;

function toWireMessage(m: ModelMessage): WireMessage {
  if (m.role === "tool") return { role: "tool", tool_call_id: m.toolCallId, content: m.content };
  if (m.role === "assistant" && "toolCalls" in m && m.toolCalls.length > 0) {
    return {
      role: "assistant",
      content: m.content === "" ? null : m.content,
      tool_calls: m.toolCalls.map((c) => ({
        id: c.id,
        type: "function",
        function: { name: c.name, arguments: JSON.stringify(c.args ?? {}) },
      })),
    };
  }
  return { role: m.role, content: m.content };
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The one place a library or transport failure becomes a ModelError. */
function toModelError(err: unknown, aborted: boolean, idleTimedOut: boolean, timeoutMs: number): ModelError {
  if (err instanceof ModelError) return err;
  if (aborted) return new ModelError("aborted", "model call aborted", { cause: err });
  if (idleTimedOut) return new ModelError("network_error", `model stream silent for ${timeoutMs} ms`, { cause: err });
  if (err instanceof OpenAI.APIUserAbortError) return new ModelError("aborted", "model call aborted", { cause: err });
  if (err instanceof OpenAI.APIConnectionTimeoutError) {
    return new ModelError("network_error", `model provider did not answer within ${timeoutMs} ms`, { cause: err });
  }
  if (err instanceof OpenAI.APIConnectionError) {
    return new ModelError("network_error", `cannot reach model provider: ${errorMessage(err)}`, { cause: err });
  }
  if (err instanceof OpenAI.APIError) {
    // The provider's own words reach the tenant (a 400 says what was wrong with the request),
    // so they are made safe here, the one place they enter a ModelError.
    const said = safeProviderMessage(err.message);
    const wait = retryAfterMs(err.headers);
    if (err.status === 429) {
      return new ModelError("rate_limited", `model provider rate limited: ${said}`, {
        cause: err,
        status: 429,
        retryAfterMs: wait,
      });
    }
    // status undefined: an error event inside an already-open stream.
    return new ModelError("provider_error", `model provider error: ${said}`, {
      cause: err,
      status: err.status ?? null,
      retryAfterMs: wait,
    });
  }
  if (err instanceof SyntaxError) {
    return new ModelError("bad_response", `model stream is not valid JSON: ${err.message}`, { cause: err });
  }
  // The body failed mid-read (socket reset, "terminated"): the provider went away.
  return new ModelError("network_error", `model stream failed: ${errorMessage(err)}`, { cause: err });
}

interface PartialToolCall {
  id: string;
  name: string;
  args: string[];
}

function completeToolCalls(partials: Map<number, PartialToolCall>): ModelChunk[] {
  return [...partials.entries()]
    .sort(([a], [b]) => a - b)
    .map(([index, p]) => {
      if (!p.id || !p.name) {
        throw new ModelError("bad_response", `tool call at index ${index} has no ${p.id ? "name" : "id"}`);
      }
      const raw = p.args.join("");
      let args: unknown;
      try {
        args = raw.trim() === "" ? {} : JSON.parse(raw);
      } catch (err) {
        throw new ModelError("bad_response", `tool call ${p.name} (${p.id}) has arguments that are not JSON`, {
          cause: err,
        });
      }
      return { type: "tool_call" as const, id: p.id, name: p.name, args };
    });
}

export function createOpenAICompatibleClient(cfg: ModelConfig): ModelClient {
  const timeoutMs = cfg.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const client = new OpenAI({
    baseURL: cfg.baseUrl,
    apiKey: cfg.apiKey,
    // Explicit nulls: the library would otherwise read OPENAI_* from process.env.
    organization: null,
    project: null,
    webhookSecret: null,
    timeout: timeoutMs,
    maxRetries: cfg.maxRetries ?? 0,
  });

  async function* streamTurn(req: ModelTurnRequest): AsyncGenerator<ModelChunk> {
    const userSignal = req.signal;
    if (userSignal?.aborted) throw new ModelError("aborted", "model call aborted before it started");

    // One controller per turn, aborted by the caller's signal or by the idle timer. Not
    // AbortSignal.any: combined with a long-lived caller signal it leaks (nodejs/node#55351).
    // The library's timeout covers only the wait for headers; a stream that goes silent
    // afterwards is cut by the idle timer, re-armed on every chunk.
    const turn = new AbortController();
    let idleTimedOut = false;
    const idleTimer = setTimeout(() => {
      idleTimedOut = true;
      turn.abort();
    }, timeoutMs);
    const onCallerAbort = () => turn.abort(userSignal?.reason);
    userSignal?.addEventListener("abort", onCallerAbort, { once: true });
    const signal = turn.signal;
    const fail = (err: unknown) => toModelError(err, userSignal?.aborted === true, idleTimedOut, timeoutMs);

    try {
      let stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>;
      try {
        stream = await client.chat.completions.create(
          {
            model: req.model ?? cfg.model,
            messages: req.messages.map(toWireMessage),
            ...(req.tools?.length
              ? {
                  tools: req.tools.map((t) => ({
                    type: "function" as const,
                    function: { name: t.name, description: t.description, parameters: t.parameters },
                  })),
                }
              : {}),
            ...(req.maxOutputTokens != null ? { max_tokens: req.maxOutputTokens } : {}),
            ...(req.temperature != null ? { temperature: req.temperature } : {}),
            ...(req.topP != null ? { top_p: req.topP } : {}),
            ...(req.responseFormat
              ? {
                  response_format: {
                    type: "json_schema" as const,
                    json_schema: { name: req.responseFormat.name, schema: req.responseFormat.schema },
                  },
                }
              : {}),
            stream: true,
            stream_options: { include_usage: true },
          },
          { signal },
        );
      } catch (err) {
        throw fail(err);
      }

      const toolCalls = new Map<number, PartialToolCall>();
      let finishReason: string | null = null;
      let finished = false;
      let usage: { promptTokens: number; completionTokens: number } | undefined;
      try {
        for await (const chunk of stream) {
          idleTimer.refresh();
          if (chunk.usage) {
            usage = { promptTokens: chunk.usage.prompt_tokens, completionTokens: chunk.usage.completion_tokens };
          }
          const choice = chunk.choices[0];
          if (!choice) continue;
          const delta = choice.delta;
          if (delta?.content) {
            yield { type: "text", text: delta.content };
            // Time the consumer spent with the chunk is not provider silence.
            idleTimer.refresh();
          }
          for (const tc of delta?.tool_calls ?? []) {
            let partial = toolCalls.get(tc.index);
            if (!partial) {
              partial = { id: "", name: "", args: [] };
              toolCalls.set(tc.index, partial);
            }
            if (tc.id) partial.id = tc.id;
            // Providers send the name once, in the call's first fragment; a repeat must not double it.
            if (tc.function?.name && !partial.name) partial.name = tc.function.name;
            if (tc.function?.arguments) partial.args.push(tc.function.arguments);
          }
          if (choice.finish_reason) {
            finishReason = choice.finish_reason;
            finished = true;
          }
        }
      } catch (err) {
        throw fail(err);
      }
      // The library ends iteration quietly when its request is aborted; an abort is not an end.
      if (signal.aborted) throw fail(signal.reason);
      if (!finished) throw new ModelError("network_error", "model stream ended before a finish reason");

      for (const call of completeToolCalls(toolCalls)) yield call;
      yield { type: "done", finishReason, ...(usage ? { usage } : {}) };
    } finally {
      clearTimeout(idleTimer);
      userSignal?.removeEventListener("abort", onCallerAbort);
    }
  }

  return { streamTurn };
}
