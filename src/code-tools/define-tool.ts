/**
 * `defineTool` (package export `edge-agent-runtime/tools`): a team's own tool as a TypeScript
 * function. A module of such tools is named in a host's HOST_TOOLS; the host publishes each one
 * in the catalog (GET /v1/tools) and runs every call on a worker thread, never on its event loop
 * (docs/tools.md, "Code tools"). Nothing here runs the tool: this only checks the declaration
 * and marks it, so a host can find the tools among a module's exports.
 *
 * `input` is a zod schema (v4, the package's own dependency) or a JSON Schema object; the host
 * turns a zod schema into the JSON Schema the model sees and validates the model's arguments
 * against it on the tool's thread before `run` is called.
 */
import type { z } from "zod";
import { CODE_TOOL_LIMITS, codeToolNameProblem } from "../contracts/tools";

/** A JSON Schema for a tool's arguments: an object schema, as providers require. */
export type JsonSchemaObject = { type: "object"; [keyword: string]: unknown };

export type ToolInput = z.ZodType | JsonSchemaObject;

/** The arguments `run` receives: the zod schema's output, or a plain object for a JSON Schema. */
export type ToolArgs<I extends ToolInput> = I extends z.ZodType ? z.output<I> : Record<string, unknown>;

export interface ToolLog {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** Who is calling: the run's fencing identity (the same values MCP calls carry, docs/tools.md). */
export interface ToolContext {
  job_id: string;
  /** This execution (a new one per claim of the job). */
  execution_id: string;
  /** The epoch the owner claimed the job with; higher is newer. */
  epoch: number;
  tenant_id: string;
  /**
   * `<job id>:<tool call id>`: the same for every execution that makes this call (a resumed run
   * continues the conversation that holds the call id), so a tool can answer a repeat from its
   * own record instead of doing the work twice.
   */
  idempotency_key: string;
  /** Aborted when the run is cancelled or stops; the call's thread is terminated 1 s later. */
  signal: AbortSignal;
  /** Lines in the host's log, tagged with the job, execution and tool. */
  log: ToolLog;
}

export interface ToolSpec<I extends ToolInput = ToolInput, R = unknown> {
  name: string;
  /** What the model reads to decide when to call it. */
  description: string;
  input: I;
  /** A repeat of the same call (same idempotency_key) is safe; published in the catalog. */
  idempotent?: boolean;
  /** Every call waits for a person's approval first (as an agent's `requires_approval`). */
  requires_approval?: boolean;
  /** The call's bound on its thread; past it the thread is terminated (tool_timeout). */
  timeout_ms?: number;
  /** The result must be JSON-serializable; it is what the model reads (as JSON). */
  run(args: ToolArgs<I>, ctx: ToolContext): Promise<R> | R;
}

/** Marks a defined tool. `Symbol.for`, so a host finds tools defined with another copy of the package. */
export const CODE_TOOL_MARK: unique symbol = Symbol.for("edge-agent-runtime.code-tool") as never;

export type CodeTool<I extends ToolInput = ToolInput, R = unknown> = Readonly<
  Required<Omit<ToolSpec<I, R>, "run">> & Pick<ToolSpec<I, R>, "run">
> & { readonly [CODE_TOOL_MARK]: true };

export class ToolDefinitionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ToolDefinitionError";
  }
}

/** Declare a tool; throws `ToolDefinitionError` naming the tool when the declaration is unusable. */
export function defineTool<I extends ToolInput, R>(spec: ToolSpec<I, R>): CodeTool<I, R> {
  const name = typeof spec?.name === "string" ? spec.name : String(spec?.name);
  const fail = (what: string) => new ToolDefinitionError(`tool "${name}": ${what}`);
  const nameProblem = codeToolNameProblem(name);
  if (nameProblem) throw fail(`name ${nameProblem}`);
  if (typeof spec.description !== "string" || spec.description.trim() === "")
    throw fail("description must be a non-empty string");
  if (spec.description.length > CODE_TOOL_LIMITS.maxDescriptionChars)
    throw fail(`description is longer than ${CODE_TOOL_LIMITS.maxDescriptionChars} characters`);
  if (typeof spec.run !== "function") throw fail("run must be a function");
  if (!isZodSchema(spec.input) && !isObjectSchema(spec.input))
    throw fail('input must be a zod schema or a JSON Schema object with "type": "object"');
  const timeout = spec.timeout_ms ?? CODE_TOOL_LIMITS.defaultTimeoutMs;
  if (
    !Number.isInteger(timeout) ||
    timeout < CODE_TOOL_LIMITS.minTimeoutMs ||
    timeout > CODE_TOOL_LIMITS.maxTimeoutMs
  ) {
    throw fail(
      `timeout_ms must be an integer from ${CODE_TOOL_LIMITS.minTimeoutMs} to ${CODE_TOOL_LIMITS.maxTimeoutMs}`,
    );
  }
  return Object.freeze({
    name,
    description: spec.description,
    input: spec.input,
    idempotent: spec.idempotent === true,
    requires_approval: spec.requires_approval === true,
    timeout_ms: timeout,
    run: spec.run,
    [CODE_TOOL_MARK]: true as const,
  });
}

/** Whether a module export is a tool made by `defineTool`. */
export function isCodeTool(value: unknown): value is CodeTool {
  return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[CODE_TOOL_MARK] === true;
}

/** A zod (v4) schema, recognised without loading zod: its `_zod` internals and `safeParse`. */
export function isZodSchema(value: unknown): value is z.ZodType {
  return (
    typeof value === "object" &&
    value !== null &&
    "_zod" in value &&
    typeof (value as { safeParse?: unknown }).safeParse === "function"
  );
}

function isObjectSchema(value: unknown): value is JsonSchemaObject {
  return (
    typeof value === "object" &&
    value !== null &&
    !Array.isArray(value) &&
    (value as { type?: unknown }).type === "object"
  );
}
