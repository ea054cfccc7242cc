/**
 * What the agent loop needs from a model provider: a streamed chat turn. Two implementations
 * share this interface: the production OpenAI-compatible adapter (configured by env) and, in
 * local dev and tests, the same adapter pointed at tools/mock-model.ts.
 */
import type { ChatMessage } from "../../src/contracts/job";

export interface ModelToolSpec {
  name: string;
  description: string;
  /** JSON Schema of the arguments. */
  parameters: Record<string, unknown>;
}

export type ModelChunk =
  | { type: "text"; text: string }
  | { type: "tool_call"; id: string; name: string; args: unknown }
  | { type: "done"; finishReason: string | null; usage?: { promptTokens: number; completionTokens: number } };

export interface ModelTurnRequest {
  messages: ChatMessage[];
  /** Overrides the configured default model. */
  model?: string;
  tools?: ModelToolSpec[];
  signal?: AbortSignal;
}

export interface ModelClient {
  /** Streams one turn. Throws ModelError for provider failures (rate limit, bad status, network). */
  streamTurn(req: ModelTurnRequest): AsyncIterable<ModelChunk>;
}

export type ModelErrorCode = "rate_limited" | "provider_error" | "network_error" | "aborted" | "bad_response";

export class ModelError extends Error {
  readonly code: ModelErrorCode;
  readonly status: number | null;
  constructor(code: ModelErrorCode, message: string, options?: { cause?: unknown; status?: number | null }) {
    super(message, { cause: options?.cause });
    this.name = "ModelError";
    this.code = code;
    this.status = options?.status ?? null;
  }
}
