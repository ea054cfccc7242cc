/**
 * The OpenAPI 3.1 document of the gateway, generated from the app's routes: each route declares
 * its operation once, beside its handler (workers/routes/route.ts registers both), and
 * buildOpenApiDocument turns those declarations into the document. Every request and response
 * body is a zod schema of this folder (z.toJSONSchema), every error code comes from ERROR_STATUS
 * and every event type from EVENT_TYPES. What is shared by many operations (the components'
 * names, the error sets, the path parameters, auth) is declared here once.
 * test/unit/openapi.test.ts validates the document; test/workers/openapi.test.ts serves it.
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
  ModelListSchema,
  UsageAnswerSchema,
} from "./catalog";
import { ClientFrameSchema, ConversationMessagesSchema, ServerFrameSchema } from "./chat";
import { ERROR_CODES, ERROR_STATUS, ErrorBodySchema, type ErrorCode } from "./errors";
import {
  EVENT_TYPES,
  EventEnvelopeSchema,
  INTERNAL_HEADERS,
  IngestAckSchema,
  IngestBatchSchema,
  IngestMultiAnswerSchema,
  IngestMultiSchema,
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
} from "./job";
import { CreateTokenBodySchema, TokenAnswerSchema } from "./tokens";
import { JobTreeSchema, TreeNodeSchema } from "./tree";
import { ApprovalAnswerSchema, ApprovalBodySchema } from "./wait";

export type JsonSchema = Record<string, unknown>;
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

export const ref = (name: SchemaName): JsonSchema => ({ $ref: `#/components/schemas/${name}` });

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
export function inline(schema: z.ZodType): JsonSchema {
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

/** Schemas by the component name they appear under, whichever way (input or output) they convert. */
const NAMES = new Map<z.ZodType, { name: string; io: "input" | "output" }>([
  ...Object.entries(REQUEST_SCHEMAS).map(([name, s]) => [s, { name, io: "input" }] as const),
  ...Object.entries(RESPONSE_SCHEMAS).map(([name, s]) => [s, { name, io: "output" }] as const),
]);

export interface Success {
  status: Status;
  description: string;
  /**
   * A JSON body: a zod schema (a component: named above, or named after the operation) or JSON
   * Schema as is; omitted for answers that are not JSON (SSE, the WebSocket upgrade).
   */
  schema?: z.ZodType | JsonSchema;
  content?: Record<string, unknown>;
  extensions?: Record<string, unknown>;
}

/** What a route declares about itself (workers/routes/route.ts); its path comes from the app. */
export interface OperationSpec {
  method: "get" | "post" | "put" | "patch" | "delete";
  operationId: string;
  tag:
    | "jobs"
    | "events"
    | "conversations"
    | "tokens"
    | "agents"
    | "schedules"
    | "evals"
    | "webhooks"
    | "models"
    | "health"
    | "internal";
  summary: string;
  description?: string;
  /**
   * `bearer`: an API key or an access token in Authorization; `url_token`: that, or a token in
   * ?access_token= (the SSE and WebSocket routes); `api_key`: an API key only (minting tokens).
   */
  auth: "none" | "api_key" | "bearer" | "url_token" | "signature";
  /** Path and header parameters, and query parameters the route checks by hand. */
  parameters?: JsonSchema[];
  /** The JSON body, read by the body reader (workers/request/body.ts) with this schema. */
  body?: z.ZodType;
  /** The query, validated with this schema; each key is a query parameter. */
  query?: z.ZodObject;
  /** A body the route reads itself (the signed ingest): documented only. */
  requestBody?: JsonSchema;
  responses: Success[];
  /** Error codes this operation can answer; grouped by their ERROR_STATUS into responses. */
  errors: readonly ErrorCode[];
  extensions?: Record<string, unknown>;
}

/** A route's operation where the app serves it (an OpenAPI template: `/v1/jobs/{id}`). */
export interface Operation extends OperationSpec {
  path: string;
}

/**
 * Every /v1 route: the credential (401; 403 for a token whose scope or binding does not cover
 * the route; 503 when Postgres is away for a key lookup), the per-key request rate (429) and the
 * catch-all 500.
 */
export const V1_ERRORS: ErrorCode[] = [
  "unauthorized",
  "forbidden",
  "rate_limited",
  "dependency_unavailable",
  "internal",
];
/** Every route that reads a JSON body (workers/request/body.ts). */
export const BODY_ERRORS: ErrorCode[] = [
  "invalid_json",
  "invalid_request",
  "payload_too_large",
  "unsupported_media_type",
];

export const jobIdParam: JsonSchema = {
  name: "id",
  in: "path",
  required: true,
  description: "The job id (a UUID; any other value answers 404 not_found).",
  schema: { type: "string" },
};

export const callIdParam: JsonSchema = {
  name: "call_id",
  in: "path",
  required: true,
  description: "The tool call's id, as `waiting_for.call_id` and `tool.approval_requested` give it.",
  schema: { type: "string" },
};

export const conversationIdParam: JsonSchema = {
  name: "id",
  in: "path",
  required: true,
  description: "The client's conversation id, scoped by tenant; a malformed id answers 404 not_found.",
  schema: inline(CreateJobBodySchema.shape.conversation_id),
};

export const agentNameParam: JsonSchema = {
  name: "name",
  in: "path",
  required: true,
  description: "The agent's name (any other value answers 404 not_found).",
  schema: inline(CreateAgentBodySchema.shape.name),
};

export const scheduleIdParam: JsonSchema = {
  name: "id",
  in: "path",
  required: true,
  description: "The schedule id (a UUID; any other value answers 404 not_found).",
  schema: { type: "string" },
};

export const replayIdParam: JsonSchema = {
  name: "id",
  in: "path",
  required: true,
  description: "The replay id (a UUID; any other value answers 404 not_found).",
  schema: { type: "string" },
};

export const evalIdParam: JsonSchema = {
  name: "id",
  in: "path",
  required: true,
  description: "The eval id (a UUID; any other value answers 404 not_found).",
  schema: { type: "string" },
};

/** GET /v1/evals/{a}/compare/{b}'s two evals. */
export const evalPairParams: JsonSchema[] = (["a", "b"] as const).map((name) => ({
  ...evalIdParam,
  name,
  description: `The ${name === "a" ? "first" : "second"} eval's id (a UUID; another tenant's or any other value answers 404 not_found).`,
}));

export const webhookIdParam: JsonSchema = {
  name: "id",
  in: "path",
  required: true,
  description: "The webhook endpoint's id (a UUID; any other value answers 404 not_found).",
  schema: { type: "string" },
};

export const deliveryIdParam: JsonSchema = {
  name: "delivery_id",
  in: "path",
  required: true,
  description: "The delivery's id, its `webhook-id` header (a UUID; any other value answers 404 not_found).",
  schema: { type: "string" },
};

export const agentVersionParam: JsonSchema = {
  name: "version",
  in: "path",
  required: true,
  description: "A version number from 1 (any other value answers 404 not_found).",
  schema: { type: "string", pattern: "^[1-9][0-9]{0,8}$" },
};

export const internalHeaderParams: JsonSchema[] = [
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
];

const json = (schema: JsonSchema) => ({ "application/json": { schema } });

/**
 * The zod schemas the operations use, turned into `$ref`s: a named one by its name, any other
 * by a name made from the operation (`CreateScheduleBody`, `CreateSchedule201`), so a new
 * route needs no entry above. Collected while the operations are built, converted after.
 */
class Schemas {
  readonly extra = { input: new Map<z.ZodType, string>(), output: new Map<z.ZodType, string>() };

  ref(schema: z.ZodType | JsonSchema, io: "input" | "output", fallback: string): JsonSchema {
    if (!(schema instanceof z.ZodType)) return schema;
    const named = NAMES.get(schema);
    if (named && named.io !== io) throw new Error(`${named.name} is a ${named.io} component, used as ${io}`);
    const name = named?.name ?? this.extra[io].get(schema) ?? fallback;
    if (!named) this.extra[io].set(schema, name);
    return ref(name as SchemaName);
  }

  components(): Record<string, JsonSchema> {
    const input = { ...REQUEST_SCHEMAS, ...Object.fromEntries([...this.extra.input].map(([s, n]) => [n, s])) };
    const output = { ...RESPONSE_SCHEMAS, ...Object.fromEntries([...this.extra.output].map(([s, n]) => [n, s])) };
    return { ...components(input, "input"), ...components(output, "output") };
  }
}

const SECURITY: Record<OperationSpec["auth"], JsonSchema[] | undefined> = {
  none: [],
  api_key: [{ apiKey: [] }],
  bearer: [{ apiKey: [] }, { accessToken: [] }],
  url_token: [{ apiKey: [] }, { accessToken: [] }, { accessTokenQuery: [] }],
  signature: [{ signature: [] }],
};

function errorResponses(op: OperationSpec, taken: Set<Status>): Record<string, JsonSchema> {
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

function operationObject(op: Operation, schemas: Schemas): JsonSchema {
  const named = op.operationId[0]?.toUpperCase() + op.operationId.slice(1);
  const parameters = [...(op.parameters ?? []), ...(op.query ? queryParameters(op.query) : [])];
  for (const [, name] of op.path.matchAll(/\{([^}]+)\}/g)) {
    if (!parameters.some((p) => p.in === "path" && p.name === name))
      throw new Error(`${op.operationId}: path parameter {${name}} is not declared`);
  }
  const responses: Record<string, JsonSchema> = {};
  for (const r of op.responses) {
    const schema = r.schema && schemas.ref(r.schema, "output", `${named}${r.status}`);
    responses[String(r.status)] = {
      description: r.description,
      ...(schema ? { content: json(schema) } : r.content ? { content: r.content } : {}),
      ...r.extensions,
    };
  }
  Object.assign(responses, errorResponses(op, new Set(op.responses.map((r) => r.status))));
  const body = op.body ? schemas.ref(op.body, "input", `${named}Body`) : op.requestBody;
  return {
    operationId: op.operationId,
    tags: [op.tag],
    summary: op.summary,
    ...(op.description ? { description: op.description } : {}),
    security: SECURITY[op.auth],
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(body ? { requestBody: { required: true, content: json(body) } } : {}),
    responses,
    ...op.extensions,
  };
}

/** The document of these operations (the app's: workers/routes/route.ts `operationsOf`). */
export function buildOpenApiDocument(operations: readonly Operation[]): JsonSchema {
  const schemas = new Schemas();
  const paths: Record<string, Record<string, JsonSchema>> = {};
  for (const op of operations) {
    paths[op.path] ??= {};
    const item = paths[op.path] as Record<string, JsonSchema>;
    if (item[op.method]) throw new Error(`duplicate operation ${op.method.toUpperCase()} ${op.path}`);
    item[op.method] = operationObject(op, schemas);
  }
  return {
    openapi: "3.1.0",
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    info: {
      title: "Edge agent runtime gateway",
      version: "v1",
      description:
        "Generated from the gateway's route declarations and the zod contracts in src/contracts (see docs/api.md for the prose). Every error answer is an ErrorBody; its code is one of ERROR_STATUS's.",
    },
    tags: [
      { name: "jobs", description: "Submit, read, list, cancel and steer jobs." },
      { name: "events", description: "A job's events (the EventEnvelope) as Server-Sent Events." },
      { name: "conversations", description: "WebSocket chat and history." },
      { name: "tokens", description: "Short-lived access tokens for browsers, minted with an API key." },
      { name: "agents", description: "The tenant's agent definitions, as immutable numbered versions." },
      { name: "schedules", description: "Cron schedules that submit a job at each tick, exactly once." },
      {
        name: "evals",
        description: "An agent version run over cases as jobs, each answer scored; two evals compared.",
      },
      { name: "webhooks", description: "Endpoints the runtime tells of job events, signed per Standard Webhooks." },
      { name: "models", description: "The models and tools a tenant may use, and its usage of the models." },
      { name: "health", description: "Liveness, readiness and this document; no key." },
      { name: "internal", description: "Signed by sandbox-hosts with INTERNAL_SIGNING_SECRET; not for API clients." },
    ],
    paths,
    components: {
      schemas: schemas.components(),
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
