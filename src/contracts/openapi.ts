/**
 * The OpenAPI 3.1 document of the gateway, assembled from the zod contracts of this folder: every
 * request and response body is one of their schemas (z.toJSONSchema), every error code comes
 * from ERROR_STATUS and every event type from EVENT_TYPES. What the schemas cannot say (which
 * route answers which status, auth, the SSE and WebSocket protocols) is declared here once per
 * operation. test/workers/openapi.test.ts fails when a route of the app has no operation here or
 * an operation has no route; test/unit/openapi.test.ts validates the document.
 *
 * Runtime-neutral (no Node imports): the gateway builds it in workerd for GET /openapi.json.
 */
import { z } from "zod";
import { ACCESS_TOKEN_PARAM } from "./access";
import { AgentDefinitionSchema, AgentViewSchema, CreateAgentBodySchema } from "./agent";
import {
  AgentAnswerSchema,
  AgentPageSchema,
  AgentVersionPageSchema,
  ListAgentsQuerySchema,
  ModelListSchema,
  UsageAnswerSchema,
  UsageQuerySchema,
} from "./catalog";
import {
  CHAT_ERROR_CODES,
  ClientFrameSchema,
  ConversationMessagesSchema,
  MULTITASK_POLICIES,
  ServerFrameSchema,
} from "./chat";
import { ERROR_CODES, ERROR_STATUS, ErrorBodySchema, type ErrorCode } from "./errors";
import {
  EVENT_TYPES,
  EventEnvelopeSchema,
  INTERNAL_HEADERS,
  IngestAckSchema,
  IngestBatchSchema,
  IngestMultiAnswerSchema,
  IngestMultiSchema,
  TERMINAL_EVENT_TYPES,
} from "./events";
import { HealthSchema, ReadinessSchema } from "./health";
import {
  CancelAnswerSchema,
  CreateJobBodySchema,
  InputAnswerSchema,
  InputListSchema,
  JobAnswerSchema,
  JobInputBodySchema,
  JobPageSchema,
  JobViewSchema,
  ListJobsQuerySchema,
} from "./job";
import { SSE_FINISHED_STATUS, SSE_RETRY_MS } from "./sse";
import { CreateTokenBodySchema, TokenAnswerSchema } from "./tokens";
import { JobTreeSchema, TreeNodeSchema } from "./tree";
import { ApprovalAnswerSchema, ApprovalBodySchema } from "./wait";

type JsonSchema = Record<string, unknown>;
type Status = number;

/**
 * Components, named. Request bodies are converted as zod *parses* them (io "input": a field with
 * a default is optional, a non-strict object allows unknown keys, which are dropped); responses as
 * the gateway *sends* them (io "output": every field present, nothing extra).
 */
const REQUEST_SCHEMAS = {
  CreateJobBody: CreateJobBodySchema,
  CreateAgentBody: CreateAgentBodySchema,
  AgentDefinition: AgentDefinitionSchema,
  JobInputBody: JobInputBodySchema,
  ApprovalBody: ApprovalBodySchema,
  IngestBatch: IngestBatchSchema,
  IngestMulti: IngestMultiSchema,
  ClientFrame: ClientFrameSchema,
  CreateTokenBody: CreateTokenBodySchema,
} as const;

const RESPONSE_SCHEMAS = {
  ErrorBody: ErrorBodySchema,
  Job: JobViewSchema,
  JobAnswer: JobAnswerSchema,
  JobPage: JobPageSchema,
  CancelAnswer: CancelAnswerSchema,
  InputAnswer: InputAnswerSchema,
  InputList: InputListSchema,
  ApprovalAnswer: ApprovalAnswerSchema,
  JobTree: JobTreeSchema,
  // Named because it is recursive: unnamed, zod puts the cycle in a `__shared` document whose
  // `$defs` no `#/components/schemas/…` reference can reach (two fragments in one URI).
  JobTreeNode: TreeNodeSchema,
  EventEnvelope: EventEnvelopeSchema,
  ConversationMessages: ConversationMessagesSchema,
  ServerFrame: ServerFrameSchema,
  Agent: AgentViewSchema,
  AgentAnswer: AgentAnswerSchema,
  AgentPage: AgentPageSchema,
  AgentVersionPage: AgentVersionPageSchema,
  ModelList: ModelListSchema,
  UsageAnswer: UsageAnswerSchema,
  Health: HealthSchema,
  Readiness: ReadinessSchema,
  IngestAck: IngestAckSchema,
  IngestMultiAnswer: IngestMultiAnswerSchema,
  TokenAnswer: TokenAnswerSchema,
} as const;

type SchemaName = keyof typeof REQUEST_SCHEMAS | keyof typeof RESPONSE_SCHEMAS;

const ref = (name: SchemaName): JsonSchema => ({ $ref: `#/components/schemas/${name}` });

function components(schemas: Record<string, z.ZodType>, io: "input" | "output"): Record<string, JsonSchema> {
  const registry = z.registry<{ id: string }>();
  for (const [id, schema] of Object.entries(schemas)) registry.add(schema, { id });
  const out = z.toJSONSchema(registry, { io, uri: (id) => `#/components/schemas/${id}` }).schemas;
  if (out.__shared) throw new Error("a schema reused across components is unnamed (a recursive one?): name it here");
  // Each component comes out as a standalone document; inside OpenAPI the dialect is the
  // document's (jsonSchemaDialect), and a fragment-only $id is not a valid 2020-12 $id.
  for (const s of Object.values(out)) {
    delete s.$schema;
    delete s.$id;
  }
  // The envelope is a union on `type` (oneOf: one variant per type, with its payload). The list of
  // types is stated on top as well, where a reader or a client generator looks first.
  const envelope = out.EventEnvelope;
  if (envelope) {
    Object.assign(envelope, {
      type: "object",
      properties: { type: { type: "string", enum: [...EVENT_TYPES] } },
      required: ["type"],
    });
  }
  return out as Record<string, JsonSchema>;
}

/** One schema, inline (no $schema: the document's dialect applies). */
function inline(schema: z.ZodType): JsonSchema {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io: "input" });
  return rest;
}

/** Query parameters from a zod object, required exactly when zod requires them on input. */
function queryParameters(schema: z.ZodObject): JsonSchema[] {
  const json = z.toJSONSchema(schema, { io: "input" }) as {
    properties: Record<string, JsonSchema>;
    required?: string[];
  };
  return Object.entries(json.properties).map(([name, s]) => ({
    name,
    in: "query",
    required: json.required?.includes(name) ?? false,
    schema: s,
  }));
}

interface Success {
  status: Status;
  description: string;
  /** A JSON body; omitted for answers that are not JSON (SSE, the WebSocket upgrade). */
  schema?: JsonSchema;
  content?: Record<string, unknown>;
  extensions?: Record<string, unknown>;
}

interface Operation {
  method: "get" | "post";
  /** OpenAPI template (`{id}`), matched against the app's `/:id` routes by the workers test. */
  path: string;
  operationId: string;
  tag: "jobs" | "events" | "conversations" | "tokens" | "agents" | "models" | "health" | "internal";
  summary: string;
  description?: string;
  /**
   * `bearer`: an API key or an access token in Authorization; `url_token`: that, or a token in
   * ?access_token= (the SSE and WebSocket routes); `api_key`: an API key only (minting tokens).
   */
  auth: "none" | "api_key" | "bearer" | "url_token" | "signature";
  parameters?: JsonSchema[];
  body?: JsonSchema;
  responses: Success[];
  /** Error codes this operation can answer; grouped by their ERROR_STATUS into responses. */
  errors: ErrorCode[];
  extensions?: Record<string, unknown>;
}

/**
 * Every /v1 route: the credential (401; 403 for a token whose scope or binding does not cover
 * the route; 503 when Postgres is away for a key lookup), the per-key request rate (429) and the
 * catch-all 500.
 */
const V1_ERRORS: ErrorCode[] = ["unauthorized", "forbidden", "rate_limited", "dependency_unavailable", "internal"];
/** Every route that reads a JSON body (workers/request/body.ts). */
const BODY_ERRORS: ErrorCode[] = ["invalid_json", "invalid_request", "payload_too_large", "unsupported_media_type"];

const jobIdParam: JsonSchema = {
  name: "id",
  in: "path",
  required: true,
  description: "The job id (a UUID; any other value answers 404 not_found).",
  schema: { type: "string" },
};

const callIdParam: JsonSchema = {
  name: "call_id",
  in: "path",
  required: true,
  description: "The tool call's id, as `waiting_for.call_id` and `tool.approval_requested` give it.",
  schema: { type: "string" },
};

const conversationIdParam: JsonSchema = {
  name: "id",
  in: "path",
  required: true,
  description: "The client's conversation id, scoped by tenant; a malformed id answers 404 not_found.",
  schema: inline(CreateJobBodySchema.shape.conversation_id),
};

const agentNameParam: JsonSchema = {
  name: "name",
  in: "path",
  required: true,
  description: "The agent's name (any other value answers 404 not_found).",
  schema: inline(CreateAgentBodySchema.shape.name),
};

const agentVersionParam: JsonSchema = {
  name: "version",
  in: "path",
  required: true,
  description: "A version number from 1 (any other value answers 404 not_found).",
  schema: { type: "string", pattern: "^[1-9][0-9]{0,8}$" },
};

const json = (schema: JsonSchema) => ({ "application/json": { schema } });

const OPERATIONS: Operation[] = [
  {
    method: "get",
    path: "/healthz",
    operationId: "health",
    tag: "health",
    summary: "Liveness: answers whenever the Worker runs",
    auth: "none",
    responses: [{ status: 200, description: "The Worker runs.", schema: ref("Health") }],
    errors: [],
  },
  {
    method: "get",
    path: "/readyz",
    operationId: "ready",
    tag: "health",
    summary: "Readiness: Postgres and Redis both answer",
    auth: "none",
    responses: [
      { status: 200, description: "Both dependencies answered.", schema: ref("Readiness") },
      {
        status: 503,
        description:
          "A dependency did not answer (named, with `error.code` dependency_unavailable), or the gateway is misconfigured (only `ok` and `error`).",
        schema: ref("Readiness"),
      },
    ],
    errors: ["internal"],
  },
  {
    method: "get",
    path: "/openapi.json",
    operationId: "openapi",
    tag: "health",
    summary: "This document (OpenAPI 3.1, generated from src/contracts)",
    auth: "none",
    responses: [{ status: 200, description: "The OpenAPI document.", schema: { type: "object" } }],
    errors: ["internal"],
  },
  {
    method: "post",
    path: "/v1/jobs",
    operationId: "createJob",
    tag: "jobs",
    summary: "Submit a job",
    description:
      "Answers once the job row is committed in Postgres. The same `idempotency_key` with the same body returns the same job; with another body it is a 409 `idempotency_mismatch`.",
    auth: "bearer",
    body: ref("CreateJobBody"),
    responses: [
      { status: 202, description: "A new job, state `queued`.", schema: ref("JobAnswer") },
      {
        status: 200,
        description: "`idempotency_key` names a job this tenant already created: that job, as it is now.",
        schema: ref("JobAnswer"),
      },
    ],
    errors: [...BODY_ERRORS, "idempotency_mismatch", ...V1_ERRORS],
  },
  {
    method: "get",
    path: "/v1/jobs",
    operationId: "listJobs",
    tag: "jobs",
    summary: "The tenant's jobs, newest first, keyset-paginated",
    auth: "bearer",
    parameters: queryParameters(ListJobsQuerySchema),
    responses: [{ status: 200, description: "One page; `next_cursor` is null on the last.", schema: ref("JobPage") }],
    errors: ["invalid_request", ...V1_ERRORS],
  },
  {
    method: "get",
    path: "/v1/jobs/{id}",
    operationId: "getJob",
    tag: "jobs",
    summary: "One job",
    auth: "bearer",
    parameters: [jobIdParam],
    responses: [{ status: 200, description: "The job.", schema: ref("JobAnswer") }],
    errors: ["not_found", "gone", ...V1_ERRORS],
  },
  {
    method: "post",
    path: "/v1/jobs/{id}/cancel",
    operationId: "cancelJob",
    tag: "jobs",
    summary: "Cancel a job (no body)",
    description: "Committed in Postgres first; a claimed or running job's owner then stops it. Repeating is harmless.",
    auth: "bearer",
    parameters: [jobIdParam],
    responses: [{ status: 202, description: "What the cancel did.", schema: ref("CancelAnswer") }],
    errors: ["not_found", "gone", ...V1_ERRORS],
  },
  {
    method: "post",
    path: "/v1/jobs/{id}/input",
    operationId: "sendJobInput",
    tag: "jobs",
    summary: "Send a user message to a queued, running or waiting job",
    description:
      "Its owner applies it at the next model-turn boundary. To a job waiting on `ask_user` it is the answer: the job is re-queued and resumes with it as the tool result.",
    auth: "bearer",
    parameters: [jobIdParam],
    body: ref("JobInputBody"),
    responses: [
      { status: 202, description: "Stored (`already_finished` if the job had ended).", schema: ref("InputAnswer") },
      {
        status: 200,
        description: "The `idempotency_key` was used before on this job: that input, with its current status.",
        schema: ref("InputAnswer"),
      },
    ],
    errors: ["not_found", "gone", ...BODY_ERRORS, "idempotency_mismatch", "input_limit_reached", ...V1_ERRORS],
  },
  {
    method: "post",
    path: "/v1/jobs/{id}/approvals/{call_id}",
    operationId: "decideApproval",
    tag: "jobs",
    summary: "Approve or deny the tool call a waiting job waits on",
    description:
      "Records the decision durably and re-queues the job; a host resumes it from its checkpoint (approve runs the tool, deny gives the model the note). The same decision again answers the recorded one; a different one is 409.",
    auth: "bearer",
    parameters: [jobIdParam, callIdParam],
    body: ref("ApprovalBody"),
    responses: [
      { status: 202, description: "Recorded; the job is re-queued.", schema: ref("ApprovalAnswer") },
      {
        status: 200,
        description: "Already decided the same way: the recorded decision.",
        schema: ref("ApprovalAnswer"),
      },
    ],
    errors: ["not_found", "gone", ...BODY_ERRORS, "conflict", ...V1_ERRORS],
  },
  {
    method: "get",
    path: "/v1/jobs/{id}/tree",
    operationId: "getJobTree",
    tag: "jobs",
    summary: "A job and the child jobs its delegate calls created, nested",
    description:
      "Every descendant with its state, timing facts and usage, and the usage summed over each subtree. A child's `parent_call_id` is the delegate call it answers.",
    auth: "bearer",
    parameters: [jobIdParam],
    responses: [{ status: 200, description: "The tree.", schema: ref("JobTree") }],
    errors: ["not_found", "gone", ...V1_ERRORS],
  },
  {
    method: "get",
    path: "/v1/jobs/{id}/inputs",
    operationId: "listJobInputs",
    tag: "jobs",
    summary: "A job's inputs in arrival order",
    auth: "bearer",
    parameters: [jobIdParam],
    responses: [{ status: 200, description: "The inputs.", schema: ref("InputList") }],
    errors: ["not_found", "gone", ...V1_ERRORS],
  },
  {
    method: "get",
    path: "/v1/jobs/{id}/events",
    operationId: "streamJobEvents",
    tag: "events",
    summary: "The job's events as Server-Sent Events, from its durable log, then live",
    description: `The stream opens with \`retry: ${SSE_RETRY_MS}\` (the reconnect delay), then one SSE frame per event: \`id\` is the job's event offset (from 1, no gaps), \`event\` the event type, \`data\` the EventEnvelope as one line of JSON. A comment line keeps the connection alive. The stream closes right after the terminal event. Resume with \`Last-Event-ID\` (wins) or \`after\`: only events with a larger id follow. A finished job with nothing after the cursor answers ${SSE_FINISHED_STATUS}, which stops a browser's EventSource. A browser's EventSource passes a token in \`${ACCESS_TOKEN_PARAM}\`.`,
    auth: "url_token",
    parameters: [
      jobIdParam,
      {
        name: "Last-Event-ID",
        in: "header",
        required: false,
        description: "Resume after this event id (a non-negative integer).",
        schema: { type: "string" },
      },
      {
        name: "after",
        in: "query",
        required: false,
        description: "Resume after this event id, when the client cannot set Last-Event-ID.",
        schema: { type: "string" },
      },
      {
        name: "include",
        in: "query",
        required: false,
        description:
          "`descendants`: one stream of the job and every child job its delegate calls created (and theirs), interleaved; each `data` is that job's envelope (its `job_id`), each `id` a composite cursor (`t1.…`) to resume the whole tree with.",
        schema: { type: "string", enum: ["descendants"] },
      },
    ],
    responses: [
      {
        status: 200,
        description: "The event stream.",
        content: {
          "text/event-stream": {
            schema: { type: "string", description: "SSE frames; each `data` line is an EventEnvelope." },
          },
        },
        extensions: {
          "x-sse-retry-ms": SSE_RETRY_MS,
          "x-sse-data": ref("EventEnvelope"),
          "x-sse-event-types": [...EVENT_TYPES],
          "x-sse-terminal-event-types": [...TERMINAL_EVENT_TYPES],
        },
      },
      {
        status: SSE_FINISHED_STATUS,
        description: "The job is finished and nothing is after the cursor: do not reconnect (no body).",
      },
    ],
    errors: ["invalid_request", "not_found", "gone", "events_expired", ...V1_ERRORS],
  },
  {
    method: "get",
    path: "/v1/conversations/{id}/ws",
    operationId: "chatSocket",
    tag: "conversations",
    summary: "The conversation's chat WebSocket",
    description:
      "A WebSocket upgrade (`Upgrade: websocket`). Frames are JSON text: the client sends ClientFrame, the server sends ServerFrame (see `x-websocket`). A frame that fails gets an `error` frame and the connection stays open. A bad credential is a JSON 401 (403 for a read token or one bound elsewhere: the socket submits jobs) before any upgrade. A browser passes a write token in `access_token`; an API key is never accepted in the URL.",
    auth: "url_token",
    parameters: [
      conversationIdParam,
      {
        name: "multitask",
        in: "query",
        required: false,
        description: "The connection's default policy while a job of the conversation runs.",
        schema: { type: "string", enum: [...MULTITASK_POLICIES], default: "queue" },
      },
      {
        name: "agent",
        in: "query",
        required: false,
        description:
          "The agent (`name` or `name@N`) the connection's messages run when a message names none; resolved at each message's submit.",
        schema: inline(CreateJobBodySchema.shape.agent),
      },
      {
        name: "Upgrade",
        in: "header",
        required: true,
        schema: { type: "string", const: "websocket" },
      },
    ],
    responses: [{ status: 101, description: "Switched to the WebSocket protocol." }],
    errors: ["invalid_request", "not_found", ...V1_ERRORS],
    extensions: {
      "x-websocket": {
        "client-frames": ref("ClientFrame"),
        "server-frames": ref("ServerFrame"),
        "error-frame-codes": [...CHAT_ERROR_CODES],
      },
    },
  },
  {
    method: "get",
    path: "/v1/conversations/{id}/messages",
    operationId: "conversationMessages",
    tag: "conversations",
    summary: "The conversation's turns, oldest first, from its jobs",
    auth: "bearer",
    parameters: [conversationIdParam],
    responses: [{ status: 200, description: "The turns.", schema: ref("ConversationMessages") }],
    errors: ["not_found", ...V1_ERRORS],
  },
  {
    method: "post",
    path: "/v1/tokens",
    operationId: "createToken",
    tag: "tokens",
    summary: "Mint a short-lived access token for a browser",
    description:
      "Needs an API key (a token cannot mint tokens: 403). The token is bound to the key's tenant, expires after `ttl_s`, has scope `read` (GET only) or `write`, and is optionally bound to one job or one conversation. It works as `Authorization: Bearer` on every /v1 route it covers, and as `access_token` on the SSE and WebSocket routes. Its requests count against the minting key's rate limit.",
    auth: "api_key",
    body: ref("CreateTokenBody"),
    responses: [{ status: 201, description: "The token.", schema: ref("TokenAnswer") }],
    errors: [...BODY_ERRORS, ...V1_ERRORS],
  },
  {
    method: "post",
    path: "/v1/agents",
    operationId: "createAgent",
    tag: "agents",
    summary: "Define an agent: its name and version 1",
    description:
      "`model` must be one GET /v1/models lists for this tenant; `response_format`, when given, must be a valid JSON Schema (draft 2020-12, references inside the schema only). Each of `mcp_servers` must have a `url` under one of the operator's allowed MCP URL prefixes and headers that name the operator's MCP secrets (400 `invalid_request` otherwise; with no allowed prefixes MCP is off and any server is refused). An agent of that name (archived ones included) is a 409 `conflict`.",
    auth: "bearer",
    body: ref("CreateAgentBody"),
    responses: [{ status: 201, description: "Version 1.", schema: ref("AgentAnswer") }],
    errors: [...BODY_ERRORS, "conflict", ...V1_ERRORS],
  },
  {
    method: "get",
    path: "/v1/agents",
    operationId: "listAgents",
    tag: "agents",
    summary: "The tenant's live agents at their latest versions, by name, keyset-paginated",
    description: "Archived agents are left out (GET /v1/agents/{name} still reads one).",
    auth: "bearer",
    parameters: queryParameters(ListAgentsQuerySchema),
    responses: [{ status: 200, description: "One page; `next_cursor` is null on the last.", schema: ref("AgentPage") }],
    errors: ["invalid_request", ...V1_ERRORS],
  },
  {
    method: "get",
    path: "/v1/agents/{name}",
    operationId: "getAgent",
    tag: "agents",
    summary: "An agent's latest version",
    auth: "bearer",
    parameters: [agentNameParam],
    responses: [{ status: 200, description: "The latest version.", schema: ref("AgentAnswer") }],
    errors: ["not_found", ...V1_ERRORS],
  },
  {
    method: "get",
    path: "/v1/agents/{name}/versions",
    operationId: "listAgentVersions",
    tag: "agents",
    summary: "An agent's versions, newest first, keyset-paginated",
    auth: "bearer",
    parameters: [agentNameParam, ...queryParameters(ListAgentsQuerySchema)],
    responses: [
      { status: 200, description: "One page; `next_cursor` is null on the last.", schema: ref("AgentVersionPage") },
    ],
    errors: ["invalid_request", "not_found", ...V1_ERRORS],
  },
  {
    method: "get",
    path: "/v1/agents/{name}/versions/{version}",
    operationId: "getAgentVersion",
    tag: "agents",
    summary: "One version of an agent",
    auth: "bearer",
    parameters: [agentNameParam, agentVersionParam],
    responses: [{ status: 200, description: "The version.", schema: ref("AgentAnswer") }],
    errors: ["not_found", ...V1_ERRORS],
  },
  {
    method: "post",
    path: "/v1/agents/{name}/versions",
    operationId: "createAgentVersion",
    tag: "agents",
    summary: "Store the agent's next version (the whole definition; versions are never edited)",
    description:
      "Checked as POST /v1/agents checks a definition (model, response_format, mcp_servers). Jobs naming the agent without a version run this one from now on; jobs already submitted keep theirs. An archived agent takes no new versions (409 `conflict`).",
    auth: "bearer",
    parameters: [agentNameParam],
    body: ref("AgentDefinition"),
    responses: [{ status: 201, description: "The new version.", schema: ref("AgentAnswer") }],
    errors: [...BODY_ERRORS, "not_found", "conflict", ...V1_ERRORS],
  },
  {
    method: "post",
    path: "/v1/agents/{name}/archive",
    operationId: "archiveAgent",
    tag: "agents",
    summary: "Archive an agent (no body; repeating is harmless)",
    description:
      "No new job or version may name it (409 `conflict`); its versions stay readable and jobs already submitted run on.",
    auth: "bearer",
    parameters: [agentNameParam],
    responses: [
      { status: 200, description: "The latest version, with `archived_at` set.", schema: ref("AgentAnswer") },
    ],
    errors: ["not_found", ...V1_ERRORS],
  },
  {
    method: "get",
    path: "/v1/models",
    operationId: "listModels",
    tag: "models",
    summary: "The models this tenant may name (as a job's `model` or an agent's)",
    auth: "bearer",
    responses: [{ status: 200, description: "The models, the deployment's default first.", schema: ref("ModelList") }],
    errors: V1_ERRORS,
  },
  {
    method: "get",
    path: "/v1/usage",
    operationId: "getUsage",
    tag: "models",
    summary: "The tenant's tokens and model calls per UTC day and model",
    description:
      "`from` and `to` are UTC days (YYYY-MM-DD), both included, at most 366 days apart. Only days with usage appear.",
    auth: "bearer",
    parameters: queryParameters(UsageQuerySchema),
    responses: [{ status: 200, description: "The usage.", schema: ref("UsageAnswer") }],
    errors: ["invalid_request", ...V1_ERRORS],
  },
  {
    method: "post",
    path: "/internal/events",
    operationId: "ingestEvents",
    tag: "internal",
    summary: "Hosts deliver outbox batches (signed; not for API clients)",
    description:
      "The signature (INTERNAL_SIGNING_SECRET or, during a rotation, INTERNAL_SIGNING_SECRET_PREVIOUS) is checked over the raw body before anything is parsed. Each batch also carries `mac`, keyed by its execution's claim token, which the job's object checks against Postgres the first time it sees that execution (403 `forbidden` when the execution does not own the job or the mac is wrong). One job's batch answers its ack (or the error with that status); a multi-job request answers 200 with one result per batch, in request order.",
    auth: "signature",
    parameters: [
      {
        name: INTERNAL_HEADERS.timestamp,
        in: "header",
        required: true,
        description: "Milliseconds since the epoch; must be close to the gateway's clock.",
        schema: { type: "string" },
      },
      {
        name: INTERNAL_HEADERS.nonce,
        in: "header",
        required: true,
        description: "A fresh UUID per request; a repeated one is refused.",
        schema: { type: "string" },
      },
    ],
    body: { oneOf: [ref("IngestBatch"), ref("IngestMulti")] },
    responses: [
      {
        status: 200,
        description: "The batch's ack (one job), or one result per batch (many jobs).",
        schema: { oneOf: [ref("IngestAck"), ref("IngestMultiAnswer")] },
      },
    ],
    errors: [...BODY_ERRORS, "unauthorized", "forbidden", "conflict", "dependency_unavailable", "internal"],
  },
];

const SECURITY: Record<Operation["auth"], JsonSchema[] | undefined> = {
  none: [],
  api_key: [{ apiKey: [] }],
  bearer: [{ apiKey: [] }, { accessToken: [] }],
  url_token: [{ apiKey: [] }, { accessToken: [] }, { accessTokenQuery: [] }],
  signature: [{ signature: [] }],
};

function errorResponses(op: Operation, taken: Set<Status>): Record<string, JsonSchema> {
  const byStatus = new Map<Status, ErrorCode[]>();
  for (const code of new Set(op.errors)) {
    const status = ERROR_STATUS[code];
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  const out: Record<string, JsonSchema> = {};
  for (const [status, codes] of [...byStatus].sort(([a], [b]) => a - b)) {
    if (taken.has(status)) throw new Error(`${op.operationId}: status ${status} is both a success and an error`);
    out[String(status)] = {
      description: `Error: ${codes.join(", ")}.`,
      ...(status === 429
        ? {
            headers: {
              "Retry-After": {
                description: "Whole seconds to wait before retrying (at least 1).",
                schema: { type: "integer", minimum: 1 },
              },
            },
          }
        : {}),
      // The shared shape, narrowed to the codes this operation answers with this status.
      content: json({
        allOf: [ref("ErrorBody"), { properties: { error: { properties: { code: { enum: codes } } } } }],
      }),
    };
  }
  return out;
}

function operationObject(op: Operation): JsonSchema {
  const responses: Record<string, JsonSchema> = {};
  for (const r of op.responses) {
    responses[String(r.status)] = {
      description: r.description,
      ...(r.schema ? { content: json(r.schema) } : r.content ? { content: r.content } : {}),
      ...r.extensions,
    };
  }
  Object.assign(responses, errorResponses(op, new Set(op.responses.map((r) => r.status))));
  return {
    operationId: op.operationId,
    tags: [op.tag],
    summary: op.summary,
    ...(op.description ? { description: op.description } : {}),
    security: SECURITY[op.auth],
    ...(op.parameters ? { parameters: op.parameters } : {}),
    ...(op.body ? { requestBody: { required: true, content: json(op.body) } } : {}),
    responses,
    ...op.extensions,
  };
}

export function buildOpenApiDocument(): JsonSchema {
  const paths: Record<string, Record<string, JsonSchema>> = {};
  for (const op of OPERATIONS) {
    paths[op.path] ??= {};
    const item = paths[op.path] as Record<string, JsonSchema>;
    if (item[op.method]) throw new Error(`duplicate operation ${op.method.toUpperCase()} ${op.path}`);
    item[op.method] = operationObject(op);
  }
  return {
    openapi: "3.1.0",
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    info: {
      title: "Edge agent runtime gateway",
      version: "v1",
      description:
        "Generated from the zod contracts in src/contracts (see docs/api.md for the prose). Every error answer is an ErrorBody; its code is one of ERROR_STATUS's.",
    },
    tags: [
      { name: "jobs", description: "Submit, read, list, cancel and steer jobs." },
      { name: "events", description: "A job's events (the EventEnvelope) as Server-Sent Events." },
      { name: "conversations", description: "WebSocket chat and history." },
      { name: "tokens", description: "Short-lived access tokens for browsers, minted with an API key." },
      { name: "agents", description: "The tenant's agent definitions, as immutable numbered versions." },
      { name: "models", description: "The models a tenant may use, and its usage of them." },
      { name: "health", description: "Liveness, readiness and this document; no key." },
      { name: "internal", description: "Signed by sandbox-hosts with INTERNAL_SIGNING_SECRET; not for API clients." },
    ],
    paths,
    components: {
      schemas: { ...components(REQUEST_SCHEMAS, "input"), ...components(RESPONSE_SCHEMAS, "output") },
      securitySchemes: {
        apiKey: { type: "http", scheme: "bearer", description: "An API key, `ear_<8 hex>_<64 hex>`." },
        accessToken: {
          type: "http",
          scheme: "bearer",
          bearerFormat: "JWT",
          description: "An access token from POST /v1/tokens (HS256 JWT; scope and binding limit what it reaches).",
        },
        accessTokenQuery: {
          type: "apiKey",
          in: "query",
          name: ACCESS_TOKEN_PARAM,
          description:
            "An access token, on the SSE and WebSocket routes only (EventSource and WebSocket cannot set headers).",
        },
        signature: {
          type: "apiKey",
          in: "header",
          name: INTERNAL_HEADERS.signature,
          description:
            "Hex HMAC-SHA256 with INTERNAL_SIGNING_SECRET over the method, path, timestamp, nonce and raw body (src/domain/signing.ts).",
        },
      },
    },
    "x-error-codes": Object.fromEntries(ERROR_CODES.map((code) => [code, ERROR_STATUS[code]])),
  };
}
