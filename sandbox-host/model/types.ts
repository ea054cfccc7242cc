/**
 * What the agent loop needs from a model provider: a streamed chat turn. Two implementations
 * share this interface: the production OpenAI-compatible adapter (configured by env) and, in
 * local dev and tests, the same adapter pointed at tools/mock-model/main.ts.
 */
import type { ModelErrorCode } from "../../src/contracts/errors";
import type { ChatMessage } from "../../src/contracts/job";

export type { ModelErrorCode };

export interface ModelToolSpec {
  name: string;
  description: string;
  /** JSON Schema of the arguments. */
  parameters: Record<string, unknown>;
}

/** Tokens one model call used, as the provider's usage chunk reported them. */
export interface ModelUsage {
  promptTokens: number;
  completionTokens: number;
}

export type ModelChunk =
  | { type: "text"; text: string }
  | { type: "tool_call"; id: string; name: string; args: unknown }
  | { type: "done"; finishReason: string | null; usage?: ModelUsage };

/** A tool call the model made, as the agent loop hands it back in the next turn's history. */
export interface ModelToolCall {
  id: string;
  name: string;
  args: unknown;
}

/**
 * One message of a turn's history: the user-facing ChatMessage (which has no tool roles, by
 * design of the public API) plus the two shapes an agent loop adds between turns — the
 * assistant's tool calls and each tool's result. Without them a provider cannot be told that a
 * tool already ran, and the loop would never end.
 */
export type ModelMessage =
  | ChatMessage
  | { role: "assistant"; content: string; toolCalls: ModelToolCall[] }
  | { role: "tool"; toolCallId: string; content: string };

/** The JSON Schema a final answer must satisfy, sent as OpenAI's `response_format: json_schema`. */
export interface ModelResponseFormat {
  /** The schema's name as the provider wants it (letters, digits, _ and -). */
  name: string;
  schema: Record<string, unknown>;
}

export interface ModelTurnRequest {
  messages: ModelMessage[];
  /** Overrides the configured default model (behind a router: the registry's public name). */
  model?: string;
  tools?: ModelToolSpec[];
  /** Sent as `max_tokens` when set. */
  maxOutputTokens?: number | null;
  temperature?: number | null;
  topP?: number | null;
  responseFormat?: ModelResponseFormat | null;
  signal?: AbortSignal;
}

export interface ModelClient {
  /** Streams one turn. Throws ModelError for provider failures (rate limit, bad status, network). */
  streamTurn(req: ModelTurnRequest): AsyncIterable<ModelChunk>;
}

export class ModelError extends Error {
  readonly code: ModelErrorCode;
  readonly status: number | null;
  /** How long the provider asked us to wait (its Retry-After / retry-after-ms header), or null. */
  readonly retryAfterMs: number | null;
  constructor(
    code: ModelErrorCode,
    message: string,
    options?: { cause?: unknown; status?: number | null; retryAfterMs?: number | null },
  ) {
    super(message, { cause: options?.cause });
    this.name = "ModelError";
    this.code = code;
    this.status = options?.status ?? null;
    this.retryAfterMs = options?.retryAfterMs ?? null;
  }
}
