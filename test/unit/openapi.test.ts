/**
 * The OpenAPI document (generated from the app's route declarations: workers/routes/route.ts,
 * src/contracts/openapi.ts) is valid OpenAPI 3.1, its schema objects are valid JSON Schema
 * 2020-12 that compile (every reference resolves) and describe what the gateway really sends,
 * and it names every error code and event type of the contracts. Runs in Node: the OpenAPI
 * validator reads its meta-schemas from disk. That the document covers exactly the app's
 * routes, and that the gateway serves it, is test/workers/openapi.test.ts.
 */
import { Validator } from "@seriousme/openapi-schema-validator";
import { Ajv2020 } from "ajv/dist/2020.js";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { AgentDefinitionSchema, AgentViewSchema } from "../../src/contracts/agent";
import { ServerFrameSchema } from "../../src/contracts/chat";
import { ApiError, ERROR_STATUS, type ErrorCode } from "../../src/contracts/errors";
import { EVENT_TYPES } from "../../src/contracts/events";
import { JobViewSchema } from "../../src/contracts/job";
import { buildOpenApiDocument, type Operation as Declared, jobIdParam, V1_ERRORS } from "../../src/contracts/openapi";
import { toJobView } from "../../src/db/job-view";
import type { JobRow } from "../../src/db/schema";
import { gatewayOpenApiDocument } from "../helpers/openapi-document";

type Json = Record<string, unknown>;
type Responses = Record<string, { content?: Record<string, { schema: Json }> } & Json>;
type Operation = { operationId: string; responses: Responses; parameters?: { schema: Json }[] } & Json;
type Doc = { paths: Record<string, Record<string, Operation>>; components: { schemas: Record<string, Json> } };

/** Codes in ERROR_STATUS that no route returns yet. May only shrink: a code a route returns is declared on its operation. */
const KNOWN_UNANSWERED: ErrorCode[] = [];

const doc = (await gatewayOpenApiDocument()) as unknown as Doc;
const operations = Object.values(doc.paths).flatMap((item) => Object.values(item));

/** The error codes an operation declares, by status (from its narrowed ErrorBody responses). */
function errorCodes(op: Operation): Map<number, string[]> {
  const out = new Map<number, string[]>();
  for (const [status, r] of Object.entries(op.responses)) {
    const allOf = r.content?.["application/json"]?.schema.allOf as Json[] | undefined;
    if (!allOf) continue;
    const narrowed = allOf[1] as { properties: { error: { properties: { code: { enum: string[] } } } } };
    out.set(Number(status), narrowed.properties.error.properties.code.enum);
  }
  return out;
}

/**
 * JSON pointers to every schema object of the document: each component, each parameter's,
 * request body's and response's schema, and the schemas the SSE and WebSocket extensions name.
 */
function schemaPointers(d: Json): string[] {
  const esc = (s: string) => s.replaceAll("~", "~0").replaceAll("/", "~1");
  const out = Object.keys((d.components as Doc["components"]).schemas).map((n) => `/components/schemas/${esc(n)}`);
  for (const [path, item] of Object.entries(d.paths as Doc["paths"])) {
    for (const [method, op] of Object.entries(item)) {
      const at = `/paths/${esc(path)}/${method}`;
      for (const i of (op.parameters ?? []).keys()) out.push(`${at}/parameters/${i}/schema`);
      const body = (op.requestBody as { content?: Json } | undefined)?.content ?? {};
      for (const type of Object.keys(body)) out.push(`${at}/requestBody/content/${esc(type)}/schema`);
      for (const [status, r] of Object.entries(op.responses)) {
        for (const type of Object.keys(r.content ?? {}))
          out.push(`${at}/responses/${status}/content/${esc(type)}/schema`);
        if (r["x-sse-data"]) out.push(`${at}/responses/${status}/x-sse-data`);
      }
      for (const frames of ["client-frames", "server-frames"])
        if ((op["x-websocket"] as Json | undefined)?.[frames]) out.push(`${at}/x-websocket/${frames}`);
    }
  }
  return out;
}

/** Ajv over the document's components, so `#/components/schemas/X` refs resolve as in the document. */
function componentValidator(name: string) {
  const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
  ajv.addSchema({ $id: "https://gateway.test/openapi.json", components: doc.components }, "doc");
  const validate = ajv.compile({ $ref: `https://gateway.test/openapi.json#/components/schemas/${name}` });
  return (value: unknown) => (validate(value) ? [] : validate.errors);
}

describe("OpenAPI document", () => {
  it("is valid OpenAPI 3.1 (@seriousme/openapi-schema-validator)", async () => {
    const result = await new Validator().validate(doc as unknown as Json);
    expect(result).toEqual({ valid: true });
  });

  it("the validator refuses a broken document (the check can fail)", async () => {
    const healthz = (d: Doc) => d.paths["/healthz"]?.get?.responses["200"] as Responses[string];
    const broken = structuredClone(doc);
    delete healthz(broken).description;
    expect((await new Validator().validate(broken as unknown as Json)).valid).toBe(false);
    const dangling = structuredClone(doc);
    healthz(dangling).content = { "application/json": { schema: { $ref: "#/components/schemas/Nope" } } };
    expect((await new Validator().validate(dangling as unknown as Json)).valid).toBe(false);
  });

  it("every schema object is valid JSON Schema 2020-12 (the OpenAPI validator does not look inside them)", () => {
    const ajv = new Ajv2020({ strict: false });
    const schemas: [string, Json][] = Object.entries(doc.components.schemas);
    for (const op of operations) {
      for (const p of op.parameters ?? []) schemas.push([`${op.operationId} parameter`, p.schema]);
      for (const [status, r] of Object.entries(op.responses))
        for (const [type, c] of Object.entries(r.content ?? {}))
          schemas.push([`${op.operationId} ${status} ${type}`, c.schema]);
    }
    expect(schemas.length).toBeGreaterThan(40);
    for (const [where, schema] of schemas)
      expect(ajv.validateSchema(schema), `${where}: ${ajv.errorsText()}`).toBe(true);
    expect(ajv.validateSchema({ type: "uuid" }), "the meta-schema check can fail").toBe(false);
  });

  it("every schema of the document compiles with a JSON Schema 2020-12 compiler (every $ref resolves)", () => {
    // inlineRefs off: each referenced schema is compiled once, not copied into every schema that uses it.
    const ajv = new Ajv2020({ strict: false, validateFormats: false, inlineRefs: false });
    const id = "https://gateway.test/openapi.json";
    ajv.addSchema({ ...structuredClone(doc), $id: id });
    const pointers = schemaPointers(doc as unknown as Json);
    expect(pointers.length).toBeGreaterThan(100);
    // One compilation of them all (ajv compiles each referenced schema once); one by one only to name a failure.
    const all = () => ajv.compile({ allOf: pointers.map((p) => ({ $ref: `${id}#${p}` })) });
    try {
      all();
    } catch {
      for (const pointer of pointers) expect(() => ajv.compile({ $ref: `${id}#${pointer}` }), pointer).not.toThrow();
    }
    expect(all).not.toThrow();
    // The check can fail: the reference /tree had (two fragments in one URI) does not resolve.
    const broken = structuredClone(doc) as unknown as Json;
    (broken.components as Doc["components"]).schemas.JobTree = {
      properties: { tree: { $ref: "#/components/schemas/__shared#/$defs/schema0" } },
    };
    const strict = new Ajv2020({ strict: false, validateFormats: false });
    strict.addSchema({ ...broken, $id: id });
    expect(() => strict.compile({ $ref: `${id}#/components/schemas/JobTree` })).toThrow(/can't resolve reference/);
  }, 30_000); // ~2 s alone; the whole document is compiled

  it("its response schemas accept what the gateway sends", () => {
    const t = new Date("2026-01-02T03:04:05.678Z");
    const row = {
      id: crypto.randomUUID(),
      conversationId: "c1",
      state: "completed",
      owner: "host-1",
      epoch: 1,
      executionId: crypto.randomUUID(),
      output: "hi",
      error: null,
      createdAt: t,
      startedAt: t,
      preparedAt: t,
      firstOutputAt: null,
      finishedAt: t,
      model: "m",
      tools: ["shell"],
      metadata: { a: 1 },
      agentName: "triage",
      agentVersion: 3,
      outputJson: { label: "bug" },
      promptTokens: 120,
      completionTokens: 8,
      modelCalls: 2,
      usageEstimated: false,
      costUsd: 0.000042,
      parentJobId: "4f1c2a9e-8d3b-4c7a-9e2f-1a2b3c4d5e6f",
      rootJobId: "4f1c2a9e-8d3b-4c7a-9e2f-1a2b3c4d5e6f",
      depth: 1,
      recoveries: 1,
      scheduleId: "7d2e4a10-1b3c-4d5e-8f90-a1b2c3d4e5f6",
      scheduledFor: t,
      priority: 10,
      runAt: t,
      expiresAt: null,
      concurrencyKey: "repo-1",
      forkedFromJobId: "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
      forkedFromStep: 6,
    } as unknown as JobRow;
    const job = toJobView(row);
    expect(componentValidator("Job")(job)).toEqual([]);
    expect(componentValidator("JobAnswer")({ job })).toEqual([]);
    expect(componentValidator("Job")({ ...job, state: "paused" })).not.toEqual([]);
    expect(componentValidator("ErrorBody")(new ApiError("not_found", "job not found").toBody())).toEqual([]);
    expect(componentValidator("ErrorBody")({ error: { code: "nope", message: "" } })).not.toEqual([]);
    const frame = ServerFrameSchema.parse({ type: "job", job, client_message_id: "m1" });
    expect(componentValidator("ServerFrame")(frame)).toEqual([]);
    // A job without an agent or a JSON answer, as most are.
    expect(componentValidator("Job")({ ...job, agent: null, output_json: null })).toEqual([]);
    expect(componentValidator("Job")({ ...job, usage: { prompt_tokens: -1 } })).not.toEqual([]);
  });

  it("its agent, model and usage schemas accept what those routes send", () => {
    const agent = AgentViewSchema.parse({
      ...AgentDefinitionSchema.parse({ model: "m", response_format: { type: "object" } }),
      name: "triage",
      version: 2,
      latest_version: 2,
      created_at: "2026-01-02T03:04:05.678Z",
      archived_at: null,
    });
    expect(componentValidator("Agent")(agent)).toEqual([]);
    expect(componentValidator("AgentAnswer")({ agent })).toEqual([]);
    expect(componentValidator("AgentPage")({ agents: [agent], next_cursor: "abc" })).toEqual([]);
    expect(componentValidator("AgentVersionPage")({ versions: [agent], next_cursor: null })).toEqual([]);
    expect(componentValidator("Agent")({ ...agent, version: 0 })).not.toEqual([]);
    expect(
      componentValidator("ModelList")({
        models: [{ name: "m", default: true, tenant_concurrency: null, pricing: null }],
      }),
    ).toEqual([]);
    const day = {
      day: "2026-03-01",
      model: "m",
      prompt_tokens: 1,
      completion_tokens: 2,
      model_calls: 1,
      estimated: false,
      cost_usd: 0.0000012,
    };
    const p = { jobs: 3, p50: 40, p95: 100, p99: null };
    const health = {
      daily_budget_usd: null,
      spend: [{ day: "2026-03-01", agent: null, model: "m", model_calls: 1, cost_usd: 0.0000012 }],
      jobs_per_hour: [{ hour: "2026-03-01T13:00:00Z", state: "completed", jobs: 1 }],
      latency: { dispatch_ms: p, first_output_ms: p, total_ms: p },
      errors: [{ code: "provider_error", jobs: 1 }],
    };
    expect(
      componentValidator("UsageAnswer")({ from: "2026-03-01", to: "2026-03-01", usage: [day], ...health }),
    ).toEqual([]);
    expect(
      componentValidator("UsageAnswer")({ from: "x", to: "y", usage: [{ ...day, model_calls: "1" }], ...health }),
    ).not.toEqual([]);
    expect(
      componentValidator("UsageAnswer")({
        from: "x",
        to: "y",
        usage: [day],
        ...health,
        jobs_per_hour: [{ hour: "h", state: "done", jobs: 1 }],
      }),
    ).not.toEqual([]);
  });

  it("names every error code with its status, answered by at least one operation", () => {
    const answered = new Set<string>();
    for (const op of operations) {
      for (const [status, codes] of errorCodes(op)) {
        for (const code of codes) {
          expect(ERROR_STATUS[code as ErrorCode], `${op.operationId}: ${code}`).toBe(status);
          answered.add(code);
        }
      }
    }
    const codes = Object.keys(ERROR_STATUS) as ErrorCode[];
    const errorBody = doc.components.schemas.ErrorBody as {
      properties: { error: { properties: { code: { enum: string[] } } } };
    };
    expect(errorBody.properties.error.properties.code.enum).toEqual(codes);
    expect(doc["x-error-codes" as keyof Doc]).toEqual(ERROR_STATUS);
    expect(
      codes.filter((c) => !answered.has(c) && !KNOWN_UNANSWERED.includes(c)),
      "declare each code on the operations that return it (src/contracts/openapi.ts)",
    ).toEqual([]);
    expect(
      KNOWN_UNANSWERED.filter((c) => answered.has(c)),
      "answered codes must leave KNOWN_UNANSWERED",
    ).toEqual([]);
  });

  it("a new route is one declaration: its unnamed schemas become components named after it; an undeclared {param} throws", () => {
    const Schedule = z.object({ cron: z.string(), job: JobViewSchema });
    const op: Declared = {
      method: "post",
      path: "/v1/jobs/{id}/schedules",
      operationId: "createSchedule",
      tag: "jobs",
      summary: "A schedule",
      auth: "bearer",
      parameters: [jobIdParam],
      body: Schedule.pick({ cron: true }),
      responses: [{ status: 201, description: "The schedule.", schema: Schedule }],
      errors: V1_ERRORS,
    };
    const d = buildOpenApiDocument([op]) as unknown as Doc;
    const created = d.paths["/v1/jobs/{id}/schedules"]?.post as Operation;
    expect(created.requestBody).toEqual({
      required: true,
      content: { "application/json": { schema: { $ref: "#/components/schemas/CreateScheduleBody" } } },
    });
    expect(created.responses["201"]?.content?.["application/json"]?.schema).toEqual({
      $ref: "#/components/schemas/CreateSchedule201",
    });
    // A named schema inside it stays a reference to its component.
    expect(JSON.stringify(d.components.schemas.CreateSchedule201)).toContain('"$ref":"#/components/schemas/Job"');
    expect(() => buildOpenApiDocument([{ ...op, parameters: [] }])).toThrow("path parameter {id} is not declared");
  });

  it("names every event type, on the envelope and on the SSE operation", () => {
    const envelope = doc.components.schemas.EventEnvelope as { properties: { type: { enum: string[] } } };
    expect(envelope.properties.type.enum).toEqual([...EVENT_TYPES]);
    const sse = doc.paths["/v1/jobs/{id}/events"]?.get?.responses["200"] as Json;
    expect(Object.keys(sse.content as Json)).toEqual(["text/event-stream"]);
    expect(sse["x-sse-event-types"]).toEqual([...EVENT_TYPES]);
    expect(sse["x-sse-data"]).toEqual({ $ref: "#/components/schemas/EventEnvelope" });
  });
});
