/**
 * Agent definitions: a tenant's own agent as data (model, instructions, tools, limits, sampling,
 * sandbox profile, answer format), stored as immutable numbered versions. A job or conversation
 * names an agent as `name` (the latest version at submit) or `name@3` (that version); the job
 * row records the version it resolved to, so a running job never sees a later edit.
 */
import { z } from "zod";
import { ADMISSION_LIMITS } from "./admission";
import { httpUrl } from "./http-url";
import { refineStorableJson, text, whenValid } from "./text";
import { codeToolNameProblem, DELEGATE_TOOL_PREFIX, MCP_TOOL_NAME_MAX, mcpToolName, TOOL_NAMES } from "./tools";

export const AGENT_LIMITS = {
  maxInstructionsChars: 64 * 1024,
  maxDescriptionChars: 1024,
  /** A definition's serialized size (the response_format schema is the part that can grow). */
  maxDefinitionBytes: 64 * 1024,
  maxTurns: 50,
  defaultMaxTurns: 8,
  maxOutputTokens: 128_000,
  /**
   * A model call's output bound when its agent sets none (the hosts' MODEL_MAX_OUTPUT_TOKENS
   * default): no call is unbounded, so budgets can reserve its worst case (docs/quota.md).
   */
  defaultMaxOutputTokens: 4096,
  /** Models one agent may list as `model` (the primary and its fallbacks). */
  maxModels: 4,
  /** The largest `limits.max_cost_usd` (US dollars), a sanity bound on a typo. */
  maxCostUsd: 1_000_000,
  /** The largest `limits.max_tokens` (a job tree's prompt + completion tokens), a sanity bound on a typo. */
  maxTokens: 1_000_000_000,
  /** The job timeout an agent may ask for, in seconds (the default job timeout is 900 s). */
  maxTimeoutS: 86_400,
  maxListLimit: 100,
  /**
   * Tools an agent lists (sandbox and code tools): a bound on the specs every turn sends, the
   * same as one MCP server's allowed tools.
   */
  maxTools: 64,
  /** MCP servers per agent, and allowed tools per server: a bound on the specs every turn sends. */
  maxMcpServers: 8,
  maxMcpToolsPerServer: 64,
  maxMcpHeaders: 8,
  /** An MCP call's timeout: default and bounds, in ms. */
  defaultMcpTimeoutMs: 30_000,
  minMcpTimeoutMs: 100,
  maxMcpTimeoutMs: 600_000,
  /** How long a run may wait for an approval or an answer (ask_user) by default: 24 h. */
  defaultApprovalDeadlineS: 86_400,
  /** The longest wait an agent may configure: 30 days. */
  maxApprovalDeadlineS: 30 * 86_400,
} as const;

/**
 * Delegation (sub-agents): how deep a tree may grow (a submitted job is depth 0, its children
 * depth 1, …), how many children one job may create over its life, and how many jobs a whole
 * tree may hold below its root. A delegate call past a limit is a tool error the model reads.
 * Bounded so one tenant's tree cannot fill the queue for everyone (children are jobs of the
 * same tenant and draw from the same model and tenant limits).
 */
export const DELEGATION_LIMITS = {
  maxDepth: 3,
  maxChildrenPerJob: 16,
  maxChildrenPerTree: 64,
  /** The most agents one definition may list under `delegates`. */
  maxDelegates: 16,
  /** Tool names are at most 64 characters: `delegate_` + the name. */
  maxDelegateNameChars: 55,
} as const;

export { DELEGATE_TOOL_PREFIX };

/** Lower-case, digits, `-` and `_`; no `@` (it separates the version in a reference). */
export const AGENT_NAME_RE = /^[a-z0-9][a-z0-9_-]{0,62}$/;
const agentName = text().regex(AGENT_NAME_RE, "must be 1-63 of a-z 0-9 _ - and start with a letter or digit");

/** Sandbox profile names a host may offer; only `default` exists today. */
export const SANDBOX_PROFILES = ["default"] as const;

/** At a run's budget limit: fail the run, or ask a person (a waitpoint) for more. */
export const ON_BUDGET = ["fail", "ask"] as const;

export const AgentLimitsSchema = z
  .object({
    max_turns: z.number().int().min(1).max(AGENT_LIMITS.maxTurns).default(AGENT_LIMITS.defaultMaxTurns),
    max_output_tokens: z.number().int().min(1).max(AGENT_LIMITS.maxOutputTokens).nullable().default(null),
    timeout_s: z.number().int().min(1).max(AGENT_LIMITS.maxTimeoutS).nullable().default(null),
    /**
     * The most a job of this agent and the children it delegates to (its tree) may spend, in US
     * dollars at the registry's prices; reserved before each call like the tenant's daily budget
     * (docs/quota.md). At the limit the run fails `budget_exceeded`. Null: no limit.
     */
    max_cost_usd: z.number().gt(0).max(AGENT_LIMITS.maxCostUsd).nullable().default(null),
    /**
     * The most tokens (prompt + completion, every call) a job of this agent and its delegated
     * children may use, reserved before each call like max_cost_usd (docs/quota.md). Null: no limit.
     */
    max_tokens: z.number().int().min(1).max(AGENT_LIMITS.maxTokens).nullable().default(null),
    /**
     * What a run does when max_cost_usd is reached: `fail` (`budget_exceeded`), or `ask`: wait
     * at a waitpoint (`budget.exhausted`) for POST /v1/jobs/{id}/approvals/{call_id} with
     * `add_usd` (docs/quota.md, "Asking at the limit").
     */
    on_budget: z.enum(ON_BUDGET).default("fail"),
  })
  .strict();
export type AgentLimits = z.infer<typeof AgentLimitsSchema>;

/**
 * A job's own `limits` on submit: each at most its agent's (a 400 otherwise, checked at submit
 * against the resolved version); `on_budget` replaces the agent's.
 */
export const JobLimitsSchema = z
  .object({
    max_cost_usd: z.number().gt(0).max(AGENT_LIMITS.maxCostUsd).optional(),
    max_tokens: z.number().int().min(1).max(AGENT_LIMITS.maxTokens).optional(),
    on_budget: z.enum(ON_BUDGET).optional(),
  })
  .strict();
export type JobLimits = z.infer<typeof JobLimitsSchema>;

/**
 * The first of a job's `limits` above its agent's, said for a 400 (the caller appends whose), or
 * null when none is: a job may narrow its agent's budget, never widen it (an agent without a
 * limit lets its jobs set any).
 */
export function limitsAboveAgent(agent: AgentLimits, job: JobLimits | undefined): string | null {
  for (const k of ["max_cost_usd", "max_tokens"] as const) {
    const own = job?.[k];
    const cap = agent[k];
    if (own !== undefined && cap !== null && own > cap) return `${k}: ${own} is above its agent's limit of ${cap}`;
  }
  return null;
}

export const AgentSamplingSchema = z
  .object({
    temperature: z.number().min(0).max(2).nullable().default(null),
    top_p: z.number().gt(0).max(1).nullable().default(null),
  })
  .strict();

/** An MCP server's name: the prefix of its tools' names as the model sees them (`<server>__<tool>`). */
export const MCP_SERVER_NAME_RE = /^[a-z0-9][a-z0-9_-]{0,30}$/;
/**
 * A tool name the providers' function-name rule (`^[a-zA-Z0-9_-]{1,64}$`, OpenAI's) can carry
 * once prefixed; MCP allows more (dots), but such a tool could not be offered to the model.
 */
export const MCP_TOOL_NAME_RE = /^[A-Za-z0-9_-]{1,64}$/;
/** An HTTP header name (RFC 9110 token). */
const HEADER_NAME_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$/;
/**
 * Headers a definition may not set: the host's fencing headers (`x-ear-*`), the transport's own
 * (`mcp-*`, content negotiation, framing) and the connection's.
 */
const RESERVED_HEADER_RE = /^(x-ear-.*|mcp-.*|host|content-type|content-length|accept|connection|transfer-encoding)$/i;

/** One allowed tool of an MCP server: its name, or `{name, requires_approval, idempotent}`. */
export const McpToolEntrySchema = z.union([
  text().regex(MCP_TOOL_NAME_RE, "must be 1-64 of A-Z a-z 0-9 _ -"),
  z
    .object({
      name: text().regex(MCP_TOOL_NAME_RE, "must be 1-64 of A-Z a-z 0-9 _ -"),
      requires_approval: z.boolean().default(false),
      /** Safe to call again with the same idempotency key when a recovery finds it in flight (docs/tools.md). */
      idempotent: z.boolean().default(false),
    })
    .strict(),
]);
export type McpToolEntry = z.infer<typeof McpToolEntrySchema>;
export const mcpToolEntryName = (t: McpToolEntry): string => (typeof t === "string" ? t : t.name);

/**
 * An MCP server an agent's runs may call (Streamable HTTP). `headers` name operator-held secrets
 * (the hosts' MCP_SECRETS): a header value is never tenant text, so a definition cannot carry a
 * credential and a stored version never holds one.
 */
export const McpServerSchema = z
  .object({
    name: text()
      .regex(MCP_SERVER_NAME_RE, "must be 1-31 of a-z 0-9 _ - and start with a letter or digit")
      // `delegate_x` with a tool `t` is offered as `delegate_x__t`, which is also the delegate
      // tool of an agent named `x__t`: the prefix belongs to the delegate tools.
      .refine((n) => !n.startsWith(DELEGATE_TOOL_PREFIX), {
        message: `must not start with "${DELEGATE_TOOL_PREFIX}" (the delegate tools' prefix)`,
      }),
    url: httpUrl(2048).describe(
      "The server's Streamable HTTP endpoint; under one of the operator's MCP_ALLOWED_URLS prefixes.",
    ),
    headers: z
      .record(
        text(),
        z
          .object({
            secret: text().regex(/^[A-Za-z0-9_.-]{1,100}$/, "must be a secret name: 1-100 of A-Z a-z 0-9 _ . -"),
          })
          .strict(),
      )
      .superRefine((h, ctx) => {
        // Checked here rather than on the record's key schema so the message names the header.
        const names = Object.keys(h);
        if (names.length > AGENT_LIMITS.maxMcpHeaders) {
          ctx.addIssue({ code: "custom", message: `at most ${AGENT_LIMITS.maxMcpHeaders} headers` });
        }
        for (const name of names) {
          if (!HEADER_NAME_RE.test(name)) {
            ctx.addIssue({ code: "custom", path: [name], message: "is not an HTTP header name" });
          } else if (RESERVED_HEADER_RE.test(name)) {
            ctx.addIssue({
              code: "custom",
              path: [name],
              message: "is set by the host (x-ear-*, mcp-*, content and connection headers)",
            });
          }
        }
      })
      .default({})
      .describe(
        'Header name → {"secret": name}: the value is the operator\'s secret of that name, resolved on the host.',
      ),
    /** The server's tools offered to the model (the server may have more; those are never offered). */
    tools: z
      .array(McpToolEntrySchema)
      .min(1)
      .max(AGENT_LIMITS.maxMcpToolsPerServer)
      .refine((t) => new Set(t.map(mcpToolEntryName)).size === t.length, { message: "lists a tool twice" })
      .describe("The server's tools the model is offered, as <server>__<tool>; its other tools never are."),
    timeout_ms: z
      .number()
      .int()
      .min(AGENT_LIMITS.minMcpTimeoutMs)
      .max(AGENT_LIMITS.maxMcpTimeoutMs)
      .default(AGENT_LIMITS.defaultMcpTimeoutMs)
      .describe("Connect, list and each call's timeout; past it the call is cancelled and the model gets mcp_timeout."),
  })
  .strict()
  .superRefine((s, ctx) => {
    for (const [i, t] of s.tools.entries()) {
      if (mcpToolName(s.name, mcpToolEntryName(t)).length > MCP_TOOL_NAME_MAX) {
        ctx.addIssue({
          code: "custom",
          path: ["tools", i],
          message: `"${s.name}__${mcpToolEntryName(t)}" is longer than ${MCP_TOOL_NAME_MAX} characters (the providers' function-name limit)`,
        });
      }
    }
  });
export type McpServer = z.infer<typeof McpServerSchema>;
/**
 * One tool an agent offers: its name, or `{name, requires_approval, idempotent}`. A tool that
 * requires approval suspends the run when the model calls it, until a person decides (docs/api.md,
 * "Approvals and questions"). An idempotent one is called again by an execution that recovers the
 * job and finds the call in flight; any other such call is never repeated (docs/architecture.md). `jobs.tools` stays the list of names (toolNames).
 */
const agentToolName_ = z.union([
  z.enum(TOOL_NAMES),
  // A code tool (HOST_TOOLS, docs/tools.md "Code tools"): the gateway checks the catalog has it.
  text().superRefine((name, ctx) => {
    const problem = codeToolNameProblem(name);
    if (problem !== null) ctx.addIssue({ code: "custom", message: `"${name}" is not a built-in tool, and ${problem}` });
  }),
]);
export const AgentToolSchema = z.union([
  agentToolName_,
  z
    .object({
      name: agentToolName_,
      requires_approval: z.boolean().default(false),
      /** Safe to call again when a recovery finds the call in flight (docs/tools.md). */
      idempotent: z.boolean().default(false),
    })
    .strict(),
]);
export type AgentTool = z.infer<typeof AgentToolSchema>;

/** The name of a tool entry, whichever form it was written in. */
export const agentToolName = (t: AgentTool | z.input<typeof AgentToolSchema>): string =>
  typeof t === "string" ? t : t.name;

/** How long a waiting run waits, and how the wait ends when nobody answers in time. */
export const AgentApprovalSchema = z
  .object({
    deadline_s: z
      .number()
      .int()
      .min(1)
      .max(AGENT_LIMITS.maxApprovalDeadlineS)
      .default(AGENT_LIMITS.defaultApprovalDeadlineS),
    /** `deny`: the run resumes and the model is told the call was denied; `fail`: the job fails `approval_expired`. */
    on_deadline: z.enum(["deny", "fail"]).default("deny"),
  })
  .strict();
export type AgentApproval = z.infer<typeof AgentApprovalSchema>;

/** The recovery settings' defaults: a job without an agent, or whose agent says nothing, gets these. */
export const RECOVERY_DEFAULTS = { on_host_loss: "resume", max_recoveries: 3 } as const;
/** The most recoveries an agent may allow one job. */
export const MAX_RECOVERIES = 10;

/**
 * What happens to a started job whose host is lost (stopped heartbeating) or hands it off at
 * shutdown: `resume` re-queues it for a new execution that continues from its journal, at most
 * `max_recoveries` times; `fail` (or one recovery too many) ends it `lost`.
 */
export const AgentRecoverySchema = z
  .object({
    on_host_loss: z.enum(["resume", "fail"]).default(RECOVERY_DEFAULTS.on_host_loss),
    max_recoveries: z.number().int().min(0).max(MAX_RECOVERIES).default(RECOVERY_DEFAULTS.max_recoveries),
  })
  .strict();
export type AgentRecovery = z.infer<typeof AgentRecoverySchema>;

const modelName = text().min(1).max(200);

/** The models an agent's `model` names, the primary first (a single name: a list of one). */
export function agentModels(definition: { model: string | readonly string[] }): string[] {
  return typeof definition.model === "string" ? [definition.model] : [...definition.model];
}

/** What a version holds; everything but `model` has a default. */
const agentDefinitionFields = {
  description: text().max(AGENT_LIMITS.maxDescriptionChars).default(""),
  /**
   * A model name from the operator's registry (GET /v1/models), or a list of them: the first is
   * the job's model, the others its fallbacks in order (a call refused before its first token
   * goes to the next: docs/models.md, "Fallbacks").
   */
  model: z.union([
    modelName,
    z
      .array(modelName)
      .min(1)
      .max(AGENT_LIMITS.maxModels)
      .refine((m) => new Set(m).size === m.length, { message: "lists a model twice" }),
  ]),
  /** The system prompt, sent first in every model turn. */
  instructions: text().max(AGENT_LIMITS.maxInstructionsChars).default(""),
  tools: z
    .array(AgentToolSchema)
    .max(AGENT_LIMITS.maxTools)
    .refine((t) => new Set(t.map(agentToolName)).size === t.length, { message: "lists a tool twice" })
    .default([]),
  /** MCP servers whose allowed tools are offered next to the sandbox tools (docs/tools.md). */
  mcp_servers: z
    .array(McpServerSchema)
    .max(AGENT_LIMITS.maxMcpServers)
    .refine((s) => new Set(s.map((x) => x.name)).size === s.length, { message: "names a server twice" })
    .refine(
      (s) => {
        const names = s.flatMap((x) => x.tools.map((t) => mcpToolName(x.name, mcpToolEntryName(t))));
        return new Set(names).size === names.length;
      },
      { message: "two servers' tools have the same <server>__<tool> name" },
    )
    .default([]),
  approval: AgentApprovalSchema.default(AgentApprovalSchema.parse({})),
  recovery: AgentRecoverySchema.default(AgentRecoverySchema.parse({})),
  /** Offer the model an `ask_user` tool (argument `question`): the run waits for POST /v1/jobs/{id}/input. */
  ask_user: z.boolean().default(false),
  /**
   * Whose `/workspace` a job starts with: `run` (an empty one; only the job's own continuations
   * restore it) or `conversation` (the last workspace snapshot of the conversation's earlier
   * jobs, restored on the first tool call: docs/sandboxes.md "Conversation workspaces").
   */
  workspace: z.enum(["run", "conversation"]).default("run"),
  /**
   * Agents (of the same tenant, by name: the latest version when the call is made) this agent
   * may delegate to. The model gets one tool `delegate_<name>` per entry, argument `input`; each
   * call creates a child job, and the run waits (holding no slot) until the turn's children end.
   */
  delegates: z
    .array(
      text()
        .regex(AGENT_NAME_RE, "must be an agent name")
        .max(DELEGATION_LIMITS.maxDelegateNameChars, "tool names are at most 64 characters with the delegate_ prefix"),
    )
    .max(DELEGATION_LIMITS.maxDelegates)
    .refine((d) => new Set(d).size === d.length, { message: "lists an agent twice" })
    .default([]),
  limits: AgentLimitsSchema.default(AgentLimitsSchema.parse({})),
  /**
   * The `priority` of this agent's jobs when the submit gives none (a job, a batch item, a chat
   * message, a schedule's tick); a body's own `priority` wins, and a delegated child takes its
   * parent's (docs/api.md "Agents").
   */
  priority: z.number().int().min(ADMISSION_LIMITS.minPriority).max(ADMISSION_LIMITS.maxPriority).default(0),
  sampling: AgentSamplingSchema.default(AgentSamplingSchema.parse({})),
  sandbox_profile: z.enum(SANDBOX_PROFILES).default("default"),
  /**
   * A JSON Schema the final answer must satisfy: the answer is parsed as JSON and validated; a
   * reply that does not validate gets one repair turn, then the job fails `output_invalid`.
   */
  response_format: z.record(text(), z.unknown()).superRefine(refineStorableJson).nullable().default(null),
};

const fitsDefinitionBytes = [
  (d: unknown) => JSON.stringify(d).length <= AGENT_LIMITS.maxDefinitionBytes,
  { message: `the definition must serialize to at most ${AGENT_LIMITS.maxDefinitionBytes} bytes`, ...whenValid },
] as const;

/** One version's definition; POST /v1/agents/{name}/versions takes it whole (a version is never patched). */
export const AgentDefinitionSchema = z
  .object(agentDefinitionFields)
  .strict()
  .refine(...fitsDefinitionBytes);
export type AgentDefinition = z.infer<typeof AgentDefinitionSchema>;
/** As a client writes it (defaults not yet applied). */
export type AgentDefinitionInput = z.input<typeof AgentDefinitionSchema>;

/** A version's default priority; a version stored before the field existed has none, so 0. */
export const agentPriority = (d: Pick<AgentDefinition, "priority">): number => d.priority ?? 0;

/** POST /v1/agents: the name and the first version's definition, flat. */
export const CreateAgentBodySchema = z
  .object({ name: agentName, ...agentDefinitionFields })
  .strict()
  .refine(...fitsDefinitionBytes);
export type CreateAgentBody = z.infer<typeof CreateAgentBodySchema>;

/** A reference a job or conversation gives: `name` (latest at submit) or `name@N`. */
export interface AgentRef {
  name: string;
  /** null: the latest version at submit. */
  version: number | null;
}

const AGENT_REF_RE = /^([a-z0-9][a-z0-9_-]{0,62})(?:@([1-9][0-9]{0,8}))?$/;

/** `name` or `name@N` → AgentRef, or null when it is neither. */
export function parseAgentRef(ref: string): AgentRef | null {
  const m = AGENT_REF_RE.exec(ref);
  if (!m?.[1]) return null;
  return { name: m[1], version: m[2] === undefined ? null : Number(m[2]) };
}

export const agentRefSchema = text()
  .max(80)
  .refine((r) => parseAgentRef(r) !== null, { message: 'must be an agent name or "name@version"' });

/** One version of an agent as the API returns it: its identity, then its definition, flat. */
export const AgentViewSchema = z.object({
  ...agentDefinitionFields,
  name: z.string(),
  version: z.number().int().min(1),
  /** The newest version of this agent (equal to `version` on the latest). */
  latest_version: z.number().int().min(1),
  created_at: z.iso.datetime(),
  /** When the agent was archived (no new jobs may name it), or null. */
  archived_at: z.iso.datetime().nullable(),
});
export type AgentView = z.infer<typeof AgentViewSchema>;
