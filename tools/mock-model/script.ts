/**
 * What the mock model answers, decided from the request alone (pure, no I/O), so every test and
 * load run can script latency, length, tool calls and failures from inside the conversation:
 *
 * - last message from the user `!mock {json}` → the script: `reply`, `tokens`, `ttft_ms`,
 *   `tokens_per_s`, `tool_calls: [{name, args}]` (the first answer after the script only, or the
 *   first `tool_turns` answers: a run of several tool turns),
 *   `error: {status, message}`,
 *   `drop_after_tokens` (cut the connection after N tokens, a provider dying mid-stream);
 * - last message a tool result → the final answer of the turn that asked for the tools: the
 *   script's `reply`/`tokens` if the last user message had them, else `Echo: <tool results>`;
 *   no more tool calls past `tool_turns`, so an agent loop terminates;
 * - any other last user message → `Echo: <message>`.
 *
 * What an agent sends is honoured too: `echo_system` answers the system prompt, `echo_sampling`
 * the sampling the request carried (`{"model","temperature","top_p","max_tokens"}` as JSON);
 * `max_tokens` cuts the answer (finish reason `length`); `replies: [...]` answers the k-th reply
 * after the script with replies[k] (a response_format repair turn gets the next one); a request
 * with a `response_format` and no scripted reply gets a minimal instance of its schema; and
 * `no_usage` leaves the usage chunk out, as some providers do.
 */
import { z } from "zod";

export interface TimingDefaults {
  ttftMs: number;
  /** 0 = unpaced (every token written as soon as the previous one). */
  tokensPerS: number;
}

export interface PlannedToolCall {
  id: string;
  name: string;
  argsJson: string;
}

export type AnswerPlan =
  | {
      kind: "answer";
      /** Text pieces; their concatenation is the reply, exactly. */
      tokens: TokenSeq;
      toolCalls: PlannedToolCall[];
      ttftMs: number;
      tokensPerS: number;
      /** Destroy the connection after this many streamed pieces (null: finish normally). */
      dropAfterTokens: number | null;
      promptTokens: number;
      /** Whether the usage chunk is sent (when the client asked for it). */
      usage: boolean;
      /** "length" when max_tokens cut the answer. */
      finishReason: "stop" | "length" | null;
    }
  | { kind: "error"; status: number; message: string; type: string; code: string | null };

const MAX_SCRIPTED_TOKENS = 100_000;

const ScriptSchema = z
  .object({
    reply: z.string().optional(),
    tokens: z.number().int().min(0).max(MAX_SCRIPTED_TOKENS).optional(),
    ttft_ms: z.number().min(0).max(600_000).optional(),
    tokens_per_s: z.number().min(0).optional(),
    tool_calls: z
      .array(z.object({ name: z.string().min(1), args: z.unknown().optional() }))
      .max(64)
      .optional(),
    /** How many answers in a row make the `tool_calls` (default 1), the final answer after them. */
    tool_turns: z.number().int().min(1).max(20).optional(),
    error: z
      .object({
        status: z.number().int().min(400).max(599),
        message: z.string().optional(),
      })
      .optional(),
    drop_after_tokens: z.number().int().min(0).optional(),
    /** The k-th answer after the script message is replies[k] (the last one repeats). */
    replies: z.array(z.string()).min(1).max(64).optional(),
    echo_system: z.boolean().optional(),
    echo_sampling: z.boolean().optional(),
    no_usage: z.boolean().optional(),
  })
  .strict();
type Script = z.infer<typeof ScriptSchema>;

const WireMessageSchema = z.looseObject({
  role: z.string(),
  content: z
    .union([z.string(), z.null(), z.array(z.looseObject({ type: z.string(), text: z.string().optional() }))])
    .optional(),
});
type WireMessage = z.infer<typeof WireMessageSchema>;

export const CompletionRequestSchema = z.looseObject({
  model: z.string().optional(),
  messages: z.array(WireMessageSchema).min(1),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
  temperature: z.number().nullish(),
  top_p: z.number().nullish(),
  max_tokens: z.number().int().min(1).nullish(),
  max_completion_tokens: z.number().int().min(1).nullish(),
  response_format: z
    .looseObject({
      type: z.string(),
      json_schema: z.looseObject({ name: z.string().optional(), schema: z.unknown().optional() }).optional(),
    })
    .nullish(),
});
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;

const MOCK_PREFIX = "!mock";

export function textOf(m: WireMessage): string {
  if (typeof m.content === "string") return m.content;
  if (Array.isArray(m.content)) return m.content.map((p) => p.text ?? "").join("");
  return "";
}

/** Whitespace-preserving split: `"a  b\n"` → `["a  ", "b\n"]`; joining the pieces gives the text back. */
export function splitTokens(text: string): string[] {
  return text.match(/\S+\s*|\s+/g) ?? [];
}

/** The pieces of a reply, produced as they are streamed (a scripted reply may hold 100,000). */
export interface TokenSeq {
  readonly length: number;
  at(i: number): string;
}

function listedTokens(list: string[]): TokenSeq {
  return { length: list.length, at: (i) => list[i] as string };
}

/**
 * `{"tokens": n}`: "t1 t2 … tn", computed per piece. Materialising the list cost 100,000 strings
 * and as many chunk objects per request; 100 such streams at once kept the mock's process in GC
 * for seconds, which every figure measured in that process (bench:cancel) then carried.
 */
function generatedTokens(n: number): TokenSeq {
  return { length: n, at: (i) => (i === n - 1 ? `t${i + 1}` : `t${i + 1} `) };
}

export function joinTokens(tokens: TokenSeq): string {
  let out = "";
  for (let i = 0; i < tokens.length; i++) out += tokens.at(i);
  return out;
}

export class ScriptError extends Error {
  override name = "ScriptError";
}

/** Parses a `!mock {json}` message; null when the message is not a script. */
export function parseScript(text: string): Script | null {
  const trimmed = text.trimStart();
  if (!trimmed.startsWith(MOCK_PREFIX)) return null;
  const body = trimmed.slice(MOCK_PREFIX.length).trim();
  if (body === "") return {};
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch (err) {
    throw new ScriptError(`!mock script is not valid JSON: ${(err as Error).message}`);
  }
  const parsed = ScriptSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ");
    throw new ScriptError(`!mock script is invalid: ${issues}`);
  }
  return parsed.data;
}

/** Tool results since the last assistant message, oldest first. */
function trailingToolResults(messages: WireMessage[]): string[] {
  const out: string[] = [];
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role !== "tool") break;
    out.unshift(textOf(m));
  }
  return out;
}

function lastUserText(messages: WireMessage[]): string | null {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role === "user") return textOf(m);
  }
  return null;
}

function countPromptTokens(messages: WireMessage[]): number {
  return messages.reduce((n, m) => n + splitTokens(textOf(m)).length, 0);
}

/**
 * The script in force and where it was: the last user message's; or, for a request with a
 * response_format whose last user message is not a script (the host's repair request), the
 * latest scripted user message before it.
 */
function findScript(req: CompletionRequest): { script: Script | null; index: number } {
  const messages = req.messages;
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role !== "user") continue;
    const script = parseScript(textOf(m));
    if (script || !req.response_format) return { script, index: i };
  }
  return { script: null, index: -1 };
}

/** A minimal value of a JSON Schema (required properties only), for an unscripted structured answer. */
export function exampleOf(schema: unknown, depth = 0): unknown {
  if (typeof schema !== "object" || schema === null || depth > 8) return null;
  const s = schema as Record<string, unknown>;
  if ("const" in s) return s.const;
  if (Array.isArray(s.enum)) return s.enum[0];
  const type = Array.isArray(s.type) ? s.type[0] : s.type;
  switch (type) {
    case "object": {
      const props = (s.properties ?? {}) as Record<string, unknown>;
      const required = Array.isArray(s.required) ? (s.required as string[]) : [];
      return Object.fromEntries(required.map((k) => [k, exampleOf(props[k], depth + 1)]));
    }
    case "array":
      return Array.from({ length: typeof s.minItems === "number" ? s.minItems : 0 }, () =>
        exampleOf(s.items, depth + 1),
      );
    case "string":
      return "x".repeat(typeof s.minLength === "number" ? s.minLength : 1);
    case "integer":
    case "number":
      return typeof s.minimum === "number" ? s.minimum : 0;
    case "boolean":
      return false;
    default:
      return null;
  }
}

/** The first k pieces of a reply, when the request's max_tokens is below its length. */
function capped(tokens: TokenSeq, max: number | null | undefined): { tokens: TokenSeq; cut: boolean } {
  if (!max || tokens.length <= max) return { tokens, cut: false };
  return { tokens: { length: max, at: (i) => tokens.at(i) }, cut: true };
}

/** Throws ScriptError for a malformed `!mock` script (the server answers 400). */
export function planAnswer(req: CompletionRequest, defaults: TimingDefaults, nextId: () => string): AnswerPlan {
  const messages = req.messages;
  const last = messages[messages.length - 1]!;
  const userText = lastUserText(messages);
  const { script, index: scriptAt } = findScript(req);
  const afterTools = last.role === "tool";
  // The model's answers since the script: its tool calls are the first answer only (a repair
  // turn after them answers from `replies`, rather than calling the tools again).
  const answered = messages.slice(scriptAt + 1).filter((m) => m.role === "assistant").length;

  if (script?.error && !afterTools) {
    const { status } = script.error;
    return {
      kind: "error",
      status,
      message: script.error.message ?? `scripted provider error ${status}`,
      type: status >= 500 ? "server_error" : "invalid_request_error",
      code: status === 429 ? "rate_limit_exceeded" : null,
    };
  }

  let tokens: TokenSeq;
  let toolCalls: PlannedToolCall[] = [];
  const toolTurns = script?.tool_turns ?? 1;
  if (script?.tool_calls?.length && answered < toolTurns && (answered > 0 || !afterTools)) {
    tokens = listedTokens([]);
    toolCalls = script.tool_calls.map((c) => ({ id: nextId(), name: c.name, argsJson: JSON.stringify(c.args ?? {}) }));
  } else if (script?.echo_system) {
    const system = messages.filter((m) => m.role === "system").map(textOf);
    tokens = listedTokens(splitTokens(system.join("\n") || "(no system prompt)"));
  } else if (script?.echo_sampling) {
    const sampling = {
      model: req.model ?? null,
      temperature: req.temperature ?? null,
      top_p: req.top_p ?? null,
      max_tokens: req.max_tokens ?? req.max_completion_tokens ?? null,
    };
    tokens = listedTokens([JSON.stringify(sampling)]);
  } else if (script?.replies) {
    tokens = listedTokens(splitTokens(script.replies[Math.min(answered, script.replies.length - 1)]!));
  } else if (script?.reply !== undefined) {
    tokens = listedTokens(splitTokens(script.reply));
  } else if (script?.tokens !== undefined) {
    tokens = generatedTokens(script.tokens);
  } else if (req.response_format?.type === "json_schema" && !afterTools) {
    tokens = listedTokens([JSON.stringify(exampleOf(req.response_format.json_schema?.schema))]);
  } else if (afterTools) {
    tokens = listedTokens(splitTokens(`Echo: ${trailingToolResults(messages).join("\n")}`));
  } else {
    tokens = listedTokens(splitTokens(`Echo: ${userText ?? textOf(last)}`));
  }

  const limited = capped(tokens, req.max_tokens ?? req.max_completion_tokens);
  return {
    kind: "answer",
    tokens: limited.tokens,
    toolCalls,
    ttftMs: script?.ttft_ms ?? defaults.ttftMs,
    tokensPerS: script?.tokens_per_s ?? defaults.tokensPerS,
    dropAfterTokens: script?.drop_after_tokens ?? null,
    promptTokens: countPromptTokens(messages),
    usage: script?.no_usage !== true,
    finishReason: limited.cut ? "length" : null,
  };
}

/** Splits tool-call arguments into a few fragments, as real providers stream them. */
export function argumentFragments(argsJson: string, size = 16): string[] {
  if (argsJson.length === 0) return [""];
  const out: string[] = [];
  for (let i = 0; i < argsJson.length; i += size) out.push(argsJson.slice(i, i + size));
  return out;
}
