/**
 * The hosts' code tools (HOST_TOOLS): loading the modules and describing their tools. Used at
 * startup on the host's thread (main.ts: what to publish and offer; a duplicate name or a bad
 * schema stops the host with exit 2) and by every tool thread (tool-worker.ts: what to run).
 * Loading a module runs its top-level code, which is the team's; a tool's `run` is only ever
 * called on a tool thread.
 */
import { isAbsolute, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { z } from "zod";
import { type CodeTool, isCodeTool, isZodSchema } from "../../src/code-tools/define-tool";
import { CODE_TOOL_LIMITS } from "../../src/contracts/tools";
import { jsonSchemaProblem } from "../../src/domain/json-schema";

export class CodeToolsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CodeToolsError";
  }
}

/** What the catalog and the model see of a tool (GET /v1/tools, the turn's tool specs). */
export interface CodeToolSpec {
  name: string;
  description: string;
  /** Its arguments' JSON Schema (a zod input converted). */
  input_schema: Record<string, unknown>;
  idempotent: boolean;
  requires_approval: boolean;
  timeout_ms: number;
}

/** A loaded tool and the module it came from (for messages naming both). */
export interface LoadedTool {
  tool: CodeTool;
  module: string;
}

/**
 * HOST_TOOLS → module specifiers. A path (relative to `cwd`) becomes a file URL: an entry that
 * starts with `.` or `/`, or ends in a script extension (`tools/orders.ts`); anything else is a
 * package specifier (`@acme/agent-tools`), resolved from the host's own node_modules.
 */
export function toolModuleSpecifiers(list: readonly string[], cwd: string): string[] {
  return list.map((entry) => {
    if (entry.startsWith("file:")) return entry;
    if (entry.startsWith(".") || isAbsolute(entry) || /\.[cm]?[jt]s$/.test(entry)) {
      return pathToFileURL(resolve(cwd, entry)).href;
    }
    return entry;
  });
}

/**
 * Import every module and collect the tools among its exports (any export made by `defineTool`,
 * or an array of them). A module without a tool, one that fails to load, or two tools of one name
 * (in one module or two) is a `CodeToolsError` naming them.
 */
export async function loadToolModules(specifiers: readonly string[]): Promise<Map<string, LoadedTool>> {
  const tools = new Map<string, LoadedTool>();
  for (const spec of specifiers) {
    let mod: Record<string, unknown>;
    try {
      mod = (await import(spec)) as Record<string, unknown>;
    } catch (err) {
      throw new CodeToolsError(
        `HOST_TOOLS: module ${spec} cannot be loaded: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
    let found = 0;
    for (const value of Object.values(mod)) {
      for (const tool of Array.isArray(value) ? value : [value]) {
        if (!isCodeTool(tool)) continue;
        const seen = tools.get(tool.name);
        // The same object re-exported (as a named and the default export) is one tool.
        if (seen?.tool === tool) continue;
        if (seen) {
          throw new CodeToolsError(
            `HOST_TOOLS: tool "${tool.name}" is defined twice (in ${seen.module} and in ${spec})`,
          );
        }
        tools.set(tool.name, { tool, module: spec });
        found++;
      }
    }
    if (found === 0) throw new CodeToolsError(`HOST_TOOLS: module ${spec} exports no tool made by defineTool`);
  }
  return tools;
}

/**
 * A tool's catalog entry, its input as JSON Schema: a zod schema is converted (one that has no
 * JSON Schema form, such as `z.date()` or a transform, is refused), a JSON Schema must be a
 * valid draft 2020-12 object schema. Throws a `CodeToolsError` naming the tool.
 */
export function describeTool(loaded: LoadedTool): CodeToolSpec {
  const { tool, module } = loaded;
  const bad = (why: string) =>
    new CodeToolsError(`HOST_TOOLS: tool "${tool.name}" (${module}) has a bad input schema: ${why}`);
  let schema: Record<string, unknown>;
  if (isZodSchema(tool.input)) {
    try {
      const { $schema: _dialect, ...rest } = z.toJSONSchema(tool.input, { io: "input" }) as Record<string, unknown>;
      schema = rest;
    } catch (err) {
      throw bad(err instanceof Error ? err.message : String(err));
    }
  } else {
    schema = tool.input as Record<string, unknown>;
    const problem = jsonSchemaProblem(schema);
    if (problem !== null) throw bad(problem);
  }
  if (schema.type !== "object") throw bad('its JSON Schema must have "type": "object" (arguments are an object)');
  const bytes = JSON.stringify(schema).length;
  if (bytes > CODE_TOOL_LIMITS.maxInputSchemaBytes) {
    throw bad(`its JSON Schema is ${bytes} bytes, more than ${CODE_TOOL_LIMITS.maxInputSchemaBytes}`);
  }
  return {
    name: tool.name,
    description: tool.description,
    input_schema: schema,
    idempotent: tool.idempotent,
    requires_approval: tool.requires_approval,
    timeout_ms: tool.timeout_ms,
  };
}
