/**
 * The typed client of the public API (docs/api.md): jobs, their trees, cancel and input, the
 * event stream of a job or a whole tree as a resuming async iterator, the chat WebSocket with
 * resume, agents, models, usage and access tokens. Runtime-neutral (fetch, WebSocket,
 * TextDecoder, AbortSignal only) so the console, the demo, the load generator and the tests all use
 * this one. Request and answer types are the zod contracts' (src/contracts/); answers are not
 * re-validated here: the gateway builds them from the same schemas.
 *
 * One rule for what a call returns: the JSON body its route answers, exactly as docs/api.md and
 * GET /openapi.json give it (`{job}`, `{jobs, next_cursor}`, `{agent}`, `{models}`, …), never
 * unwrapped. A route that answers a repeat of an idempotent request with 200 instead of 202
 * (submit, input, decide) adds `created` (false on the repeat) beside the body's fields, since
 * only the status tells them apart. Streams (`events`, `chat`) yield what their protocol
 * carries. test/unit/client-coverage.test.ts holds every call to this rule and to the document.
 *
 *   const api = new EarClient({ baseUrl, credential: apiKey });
 *   const { job } = await api.submit({ input: { messages: [{ role: "user", content: "hi" }] } });
 *   for await (const { event } of api.events(job.id)) console.log(event.type);
 */

import type { z } from "zod";
import { ACCESS_TOKEN_PARAM, looksLikeAccessToken } from "../contracts/access";
import type { AgentDefinitionInput, AgentView, CreateAgentBody } from "../contracts/agent";
import type { ArtifactList } from "../contracts/artifacts";
import type {
  AgentAnswerSchema,
  AgentPageSchema,
  AgentVersionPageSchema,
  ModelListSchema,
  ModelViewSchema,
  ToolListSchema,
  ToolViewSchema,
  UsageAnswerSchema,
} from "../contracts/catalog";
import type { ConversationMessagesSchema, MultitaskPolicy } from "../contracts/chat";
import type {
  CreateEvalBodySchema,
  EvalAnswerSchema,
  EvalCompare,
  EvalCreatedSchema,
  EvalPageSchema,
} from "../contracts/eval";
import type {
  CreateReplayBodySchema,
  ForkBodySchema,
  ReplayAnswerSchema,
  ReplayCreatedSchema,
  RerunBody,
  StepPageSchema,
} from "../contracts/fork";
import type {
  CancelAnswerSchema,
  CreateJobBody,
  InputAnswerSchema,
  InputListSchema,
  JobAnswerSchema,
  JobBatchAnswerSchema,
  JobPageSchema,
  JobState,
  LatencyView,
} from "../contracts/job";
import type {
  CreateScheduleBody,
  PatchScheduleBody,
  ScheduleAnswerSchema,
  SchedulePageSchema,
} from "../contracts/schedule";
import type { CreateTokenBody, TokenAnswer } from "../contracts/tokens";
import type { JobTreeSchema } from "../contracts/tree";
import type { ApprovalAnswer, ApprovalBody } from "../contracts/wait";
import type {
  CreateWebhookBody,
  DeliveryAnswerSchema,
  DeliveryPageSchema,
  WebhookAnswerSchema,
  WebhookCreatedSchema,
  WebhookPageSchema,
} from "../contracts/webhook";
import { ChatConnection, type ChatOptions, type WebSocketConstructor } from "./chat";
import {
  type FollowOptions,
  followEvents,
  followTreeEvents,
  type StreamedEvent,
  type TreeFollowOptions,
  type TreeStreamedEvent,
} from "./events";
import { type Credential, errorOf, Transport } from "./http";

export interface ClientOptions {
  /** The gateway's origin, e.g. `https://api.example.com` or `http://127.0.0.1:8787`. */
  baseUrl: string;
  /** An API key or an access token, or a function returning the current one (called per request). */
  credential?: Credential;
  /** Defaults to the global fetch. */
  fetch?: typeof fetch;
  /** Defaults to the global WebSocket (Node 20 has none: pass the `ws` package's). */
  WebSocket?: WebSocketConstructor;
}

export interface CallOptions {
  signal?: AbortSignal;
}

/** `created`: false when the request repeated an idempotent one (the API answered 200, not 202). */
export type Created<T> = T & { created: boolean };

export interface ListQuery {
  state?: JobState;
  /** Only the jobs this schedule's ticks made. */
  schedule_id?: string;
  limit?: number;
  cursor?: string;
}

export interface PageQuery {
  limit?: number;
  cursor?: string;
}

/** POST /v1/jobs, GET /v1/jobs/{id}: `{job}`. */
export type JobAnswer = z.infer<typeof JobAnswerSchema>;
/** POST /v1/jobs/batch: `{jobs}`, in the batch's order. */
export type JobBatchAnswer = z.infer<typeof JobBatchAnswerSchema>;
/** GET /v1/jobs: newest first. */
export type JobPage = z.infer<typeof JobPageSchema>;
export type CancelAnswer = z.infer<typeof CancelAnswerSchema>;
export type InputAnswer = z.infer<typeof InputAnswerSchema>;
export type InputList = z.infer<typeof InputListSchema>;
/** GET /v1/jobs/{id}/tree: `{tree}`, the job and its descendants nested. */
export type JobTree = z.infer<typeof JobTreeSchema>;
/** GET /v1/jobs/{id}/steps: one page of the job's steps. */
export type StepPage = z.infer<typeof StepPageSchema>;
/** POST /v1/jobs/{id}/fork's body, as sent (`replace_result.result` any JSON value). */
export type ForkInput = z.input<typeof ForkBodySchema>;
/** POST /v1/replays's body, as sent (`filter.limit` defaults to 100). */
export type ReplayInput = z.input<typeof CreateReplayBodySchema>;
export type ReplayCreated = z.infer<typeof ReplayCreatedSchema>;
export type ReplayAnswer = z.infer<typeof ReplayAnswerSchema>;
/** POST /v1/evals's body, as sent. */
export type EvalInput = z.input<typeof CreateEvalBodySchema>;
export type EvalCreated = z.infer<typeof EvalCreatedSchema>;
export type EvalAnswer = z.infer<typeof EvalAnswerSchema>;
export type EvalPage = z.infer<typeof EvalPageSchema>;
export type { EvalCompare };
export type ConversationMessages = z.infer<typeof ConversationMessagesSchema>;
/** Every route of one agent or version: `{agent}`. */
export type AgentAnswer = z.infer<typeof AgentAnswerSchema>;
/** GET /v1/agents: live agents at their latest versions, by name. */
export type AgentPage = z.infer<typeof AgentPageSchema>;
/** GET /v1/agents/{name}/versions: newest first. */
export type AgentVersionPage = z.infer<typeof AgentVersionPageSchema>;
export type ModelList = z.infer<typeof ModelListSchema>;
export type ModelView = z.infer<typeof ModelViewSchema>;
export type ToolList = z.infer<typeof ToolListSchema>;
export type ToolView = z.infer<typeof ToolViewSchema>;
export type UsageAnswer = z.infer<typeof UsageAnswerSchema>;
/** Every route of one schedule: `{schedule}`. */
export type ScheduleAnswer = z.infer<typeof ScheduleAnswerSchema>;
/** GET /v1/schedules: every schedule, oldest first. */
export type SchedulePage = z.infer<typeof SchedulePageSchema>;
/** POST /v1/webhooks: `{webhook}` with its `secret`, shown this once. */
export type WebhookCreated = z.infer<typeof WebhookCreatedSchema>;
export type WebhookAnswer = z.infer<typeof WebhookAnswerSchema>;
export type WebhookPage = z.infer<typeof WebhookPageSchema>;
/** GET /v1/webhooks/{id}/deliveries: newest first, each with its attempts. */
export type DeliveryPage = z.infer<typeof DeliveryPageSchema>;
export type DeliveryAnswer = z.infer<typeof DeliveryAnswerSchema>;
/** POST /v1/agents as a client writes it: the name plus the definition, defaults not yet applied. */
export type CreateAgentInput = { name: CreateAgentBody["name"] } & AgentDefinitionInput;

export type { AgentDefinitionInput, AgentView, LatencyView, StreamedEvent, TreeStreamedEvent };

export class EarClient {
  private readonly transport: Transport;
  private readonly WebSocketImpl: WebSocketConstructor | undefined;

  constructor(opts: ClientOptions) {
    this.transport = new Transport(opts);
    this.WebSocketImpl = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket ?? undefined;
  }

  get baseUrl(): string {
    return this.transport.baseUrl;
  }

  /** POST /v1/jobs: `{job}`, and `created` false when `idempotency_key` named a job this tenant had already created. */
  async submit(body: CreateJobBody, opts: CallOptions = {}): Promise<Created<JobAnswer>> {
    return created(await this.transport.json<JobAnswer>("POST", "/v1/jobs", { body, signal: opts.signal }));
  }

  /**
   * POST /v1/jobs/batch: up to 100 submit bodies, created in one statement or not at all; `{jobs}`
   * in order, and `created` false when every item's `idempotency_key` named an existing job.
   */
  async submitBatch(jobs: CreateJobBody[], opts: CallOptions = {}): Promise<Created<JobBatchAnswer>> {
    return created(
      await this.transport.json<JobBatchAnswer>("POST", "/v1/jobs/batch", { body: { jobs }, signal: opts.signal }),
    );
  }

  /** GET /v1/jobs/{id}: `{job}`; `include: "input"` adds the job's submitted `input` to it. */
  async get(jobId: string, opts: CallOptions & { include?: "input" } = {}): Promise<JobAnswer> {
    const qs = opts.include ? `?include=${opts.include}` : "";
    return (await this.transport.json<JobAnswer>("GET", `/v1/jobs/${enc(jobId)}${qs}`, { signal: opts.signal })).body;
  }

  /** GET /v1/jobs: one page, newest first; pass `next_cursor` back as `cursor` for the next. */
  async list(query: ListQuery = {}, opts: CallOptions = {}): Promise<JobPage> {
    const params = new URLSearchParams();
    if (query.state !== undefined) params.set("state", query.state);
    if (query.schedule_id !== undefined) params.set("schedule_id", query.schedule_id);
    if (query.limit !== undefined) params.set("limit", String(query.limit));
    if (query.cursor !== undefined) params.set("cursor", query.cursor);
    const qs = params.size > 0 ? `?${params}` : "";
    return (await this.transport.json<JobPage>("GET", `/v1/jobs${qs}`, opts)).body;
  }

  /** GET /v1/jobs/{id}/tree: `{tree}`, the job and every child its delegate calls created, nested, with usage. */
  async tree(jobId: string, opts: CallOptions = {}): Promise<JobTree> {
    return (await this.transport.json<JobTree>("GET", `/v1/jobs/${enc(jobId)}/tree`, opts)).body;
  }

  /** GET /v1/jobs/{id}/steps: one page of the job's steps in journal order; pass `next_after` back as `after`. */
  async steps(
    jobId: string,
    query: { after?: number; limit?: number } = {},
    opts: CallOptions = {},
  ): Promise<StepPage> {
    const params = new URLSearchParams();
    if (query.after !== undefined) params.set("after", String(query.after));
    if (query.limit !== undefined) params.set("limit", String(query.limit));
    const qs = params.size > 0 ? `?${params}` : "";
    return (await this.transport.json<StepPage>("GET", `/v1/jobs/${enc(jobId)}/steps${qs}`, opts)).body;
  }

  /**
   * POST /v1/jobs/{id}/fork: a new job continuing from the job's steps 1..`from_step` (default:
   * all so far); `{job}` with `forked_from`, and `created` false for a repeated `idempotency_key`.
   */
  async fork(jobId: string, body: ForkInput = {}, opts: CallOptions = {}): Promise<Created<JobAnswer>> {
    const path = `/v1/jobs/${enc(jobId)}/fork`;
    return created(await this.transport.json<JobAnswer>("POST", path, { body, signal: opts.signal }));
  }

  /** POST /v1/jobs/{id}/rerun: a new job with the job's input from step 0 (its agent version unless `agent` names another). */
  async rerun(jobId: string, body: RerunBody = {}, opts: CallOptions = {}): Promise<Created<JobAnswer>> {
    const path = `/v1/jobs/${enc(jobId)}/rerun`;
    return created(await this.transport.json<JobAnswer>("POST", path, { body, signal: opts.signal }));
  }

  /** POST /v1/replays: rerun every job `filter` selects (at most 1,000) as one batch; `{replay: {id, jobs_total}}`. */
  async createReplay(body: ReplayInput, opts: CallOptions = {}): Promise<ReplayCreated> {
    return (await this.transport.json<ReplayCreated>("POST", "/v1/replays", { body, signal: opts.signal })).body;
  }

  /** GET /v1/replays/{id}: the replay's progress, each new job paired with the job it reruns. */
  async getReplay(id: string, opts: CallOptions = {}): Promise<ReplayAnswer> {
    return (await this.transport.json<ReplayAnswer>("GET", `/v1/replays/${enc(id)}`, opts)).body;
  }

  /** POST /v1/evals: run an agent version over cases (or a replay's jobs) as jobs and score each answer; `{eval: {id, cases_total}}`. */
  async createEval(body: EvalInput, opts: CallOptions = {}): Promise<EvalCreated> {
    return (await this.transport.json<EvalCreated>("POST", "/v1/evals", { body, signal: opts.signal })).body;
  }

  /** GET /v1/evals: the tenant's evals with their summaries, newest first. */
  async listEvals(query: PageQuery = {}, opts: CallOptions = {}): Promise<EvalPage> {
    return (await this.transport.json<EvalPage>("GET", `/v1/evals${pageQuery(query)}`, opts)).body;
  }

  /** GET /v1/evals/{id}: each case's job, scores, cost and latency, and the summary. */
  async getEval(id: string, opts: CallOptions = {}): Promise<EvalAnswer> {
    return (await this.transport.json<EvalAnswer>("GET", `/v1/evals/${enc(id)}`, opts)).body;
  }

  /** GET /v1/evals/{a}/compare/{b}: the two summaries and their cases paired by index. */
  async compareEvals(a: string, b: string, opts: CallOptions = {}): Promise<EvalCompare> {
    return (await this.transport.json<EvalCompare>("GET", `/v1/evals/${enc(a)}/compare/${enc(b)}`, opts)).body;
  }

  /** POST /v1/jobs/{id}/cancel: `{status}`, what the cancel did. */
  async cancel(jobId: string, opts: CallOptions = {}): Promise<CancelAnswer> {
    return (await this.transport.json<CancelAnswer>("POST", `/v1/jobs/${enc(jobId)}/cancel`, opts)).body;
  }

  /** POST /v1/jobs/{id}/input: `{input_id, status}`, and `created` false for a repeated `idempotency_key`. */
  async input(
    jobId: string,
    body: { content: string; idempotency_key?: string },
    opts: CallOptions = {},
  ): Promise<Created<InputAnswer>> {
    const path = `/v1/jobs/${enc(jobId)}/input`;
    return created(await this.transport.json<InputAnswer>("POST", path, { body, signal: opts.signal }));
  }

  /**
   * POST /v1/jobs/{id}/approvals/{call_id}: approve or deny the tool call a waiting job waits on.
   * The recorded decision, and `created` false when the call was already decided the same way.
   */
  async decide(
    jobId: string,
    callId: string,
    body: ApprovalBody,
    opts: CallOptions = {},
  ): Promise<Created<ApprovalAnswer>> {
    const path = `/v1/jobs/${enc(jobId)}/approvals/${enc(callId)}`;
    return created(await this.transport.json<ApprovalAnswer>("POST", path, { body, signal: opts.signal }));
  }

  /**
   * POST /v1/conversations/{id}/jobs/{job_id}/approvals/{call_id}: `decide` for a job of this
   * conversation, what a page's conversation-bound token may call (403 for another conversation's job).
   */
  async decideInConversation(
    conversationId: string,
    jobId: string,
    callId: string,
    body: ApprovalBody,
    opts: CallOptions = {},
  ): Promise<Created<ApprovalAnswer>> {
    const path = `/v1/conversations/${enc(conversationId)}/jobs/${enc(jobId)}/approvals/${enc(callId)}`;
    return created(await this.transport.json<ApprovalAnswer>("POST", path, { body, signal: opts.signal }));
  }

  /** GET /v1/jobs/{id}/artifacts: `{artifacts}`, the files the run left under /workspace/out/, in path order. */
  async artifacts(jobId: string, opts: CallOptions = {}): Promise<ArtifactList> {
    return (await this.transport.json<ArtifactList>("GET", `/v1/jobs/${enc(jobId)}/artifacts`, opts)).body;
  }

  /**
   * GET /v1/jobs/{id}/artifacts/{path}: the artifact's bytes as a Blob (its `type` the
   * artifact's content type); `path` is relative to /workspace/out/, as `artifacts` lists it.
   */
  async artifact(jobId: string, path: string, opts: CallOptions = {}): Promise<Blob> {
    const encoded = path.split("/").map(enc).join("/");
    const res = await this.transport.send("GET", `/v1/jobs/${enc(jobId)}/artifacts/${encoded}`, opts);
    if (!res.ok) throw await errorOf(res);
    return await res.blob();
  }

  /** GET /v1/jobs/{id}/inputs: `{inputs}`, in arrival order. */
  async inputs(jobId: string, opts: CallOptions = {}): Promise<InputList> {
    return (await this.transport.json<InputList>("GET", `/v1/jobs/${enc(jobId)}/inputs`, opts)).body;
  }

  /**
   * GET /v1/jobs/{id}/events as an async iterator: every event after `after` exactly once, across
   * dropped connections (resumed with Last-Event-ID), ending after the terminal event or when
   * the server answers 204 (finished, nothing after the cursor). With `descendants: true`
   * (`?include=descendants`) the job and every descendant in one stream, each event tagged by
   * its `job_id`, each id the composite cursor it resumes with, ending once every job of the
   * tree has ended. See events.ts.
   */
  events(jobId: string, opts: TreeFollowOptions): AsyncGenerator<TreeStreamedEvent, void, undefined>;
  events(jobId: string, opts?: FollowOptions): AsyncGenerator<StreamedEvent, void, undefined>;
  events(
    jobId: string,
    opts: FollowOptions | TreeFollowOptions = {},
  ): AsyncGenerator<StreamedEvent | TreeStreamedEvent, void, undefined> {
    return opts.descendants === true
      ? followTreeEvents(this.transport, jobId, opts)
      : followEvents(this.transport, jobId, opts);
  }

  /** GET /v1/conversations/{id}/messages: `{messages}`, oldest first. */
  async messages(conversationId: string, opts: CallOptions = {}): Promise<ConversationMessages> {
    const path = `/v1/conversations/${enc(conversationId)}/messages`;
    return (await this.transport.json<ConversationMessages>("GET", path, opts)).body;
  }

  /**
   * The conversation's chat WebSocket, reconnecting and resuming by itself (chat.ts). The socket
   * carries an access token in its URL: the credential itself when it is one, else a
   * conversation-bound write token minted with the API key for each connection.
   */
  chat(conversationId: string, opts: ChatOptions = {}): ChatConnection {
    const WebSocketImpl = this.WebSocketImpl;
    if (!WebSocketImpl) throw new Error("no WebSocket implementation: pass ClientOptions.WebSocket");
    const url = async () => {
      const credential = await this.transport.currentCredential();
      const token =
        credential !== undefined && looksLikeAccessToken(credential)
          ? credential
          : (await this.createToken({ scope: "write", conversation_id: conversationId })).token;
      const params = new URLSearchParams({ multitask: opts.multitask ?? "queue", [ACCESS_TOKEN_PARAM]: token });
      if (opts.agent !== undefined) params.set("agent", opts.agent);
      const base = this.transport.baseUrl.replace(/^http/, "ws");
      return `${base}/v1/conversations/${enc(conversationId)}/ws?${params}`;
    };
    return new ChatConnection(url, WebSocketImpl, opts);
  }

  /** POST /v1/agents: `{agent}`, version 1 of a new agent. */
  async createAgent(body: CreateAgentInput, opts: CallOptions = {}): Promise<AgentAnswer> {
    return (await this.transport.json<AgentAnswer>("POST", "/v1/agents", { body, signal: opts.signal })).body;
  }

  /** GET /v1/agents: one page of live agents by name; pass `next_cursor` back as `cursor`. */
  async listAgents(query: PageQuery = {}, opts: CallOptions = {}): Promise<AgentPage> {
    return (await this.transport.json<AgentPage>("GET", `/v1/agents${pageQuery(query)}`, opts)).body;
  }

  /** GET /v1/agents/{name}: `{agent}`, the latest version (archived agents too, with `archived_at`). */
  async getAgent(name: string, opts: CallOptions = {}): Promise<AgentAnswer> {
    return (await this.transport.json<AgentAnswer>("GET", `/v1/agents/${enc(name)}`, opts)).body;
  }

  /** GET /v1/agents/{name}/versions: one page, newest first. */
  async listAgentVersions(name: string, query: PageQuery = {}, opts: CallOptions = {}): Promise<AgentVersionPage> {
    const path = `/v1/agents/${enc(name)}/versions${pageQuery(query)}`;
    return (await this.transport.json<AgentVersionPage>("GET", path, opts)).body;
  }

  /** GET /v1/agents/{name}/versions/{version}: `{agent}`. */
  async getAgentVersion(name: string, version: number, opts: CallOptions = {}): Promise<AgentAnswer> {
    const path = `/v1/agents/${enc(name)}/versions/${enc(String(version))}`;
    return (await this.transport.json<AgentAnswer>("GET", path, opts)).body;
  }

  /** POST /v1/agents/{name}/versions: `{agent}`, from the whole next definition (a version is never patched). */
  async createAgentVersion(name: string, body: AgentDefinitionInput, opts: CallOptions = {}): Promise<AgentAnswer> {
    const path = `/v1/agents/${enc(name)}/versions`;
    return (await this.transport.json<AgentAnswer>("POST", path, { body, signal: opts.signal })).body;
  }

  /** POST /v1/agents/{name}/archive: `{agent}`, the latest version with `archived_at` set (repeating it is harmless). */
  async archiveAgent(name: string, opts: CallOptions = {}): Promise<AgentAnswer> {
    const path = `/v1/agents/${enc(name)}/archive`;
    return (await this.transport.json<AgentAnswer>("POST", path, opts)).body;
  }

  /** POST /v1/schedules: `{schedule}`, with its first tick in `next_run_at`. */
  async createSchedule(body: CreateScheduleBody, opts: CallOptions = {}): Promise<ScheduleAnswer> {
    return (await this.transport.json<ScheduleAnswer>("POST", "/v1/schedules", { body, signal: opts.signal })).body;
  }

  /** GET /v1/schedules: `{schedules}`, oldest first. */
  async listSchedules(opts: CallOptions = {}): Promise<SchedulePage> {
    return (await this.transport.json<SchedulePage>("GET", "/v1/schedules", opts)).body;
  }

  /** GET /v1/schedules/{id}: `{schedule}`. */
  async getSchedule(id: string, opts: CallOptions = {}): Promise<ScheduleAnswer> {
    return (await this.transport.json<ScheduleAnswer>("GET", `/v1/schedules/${enc(id)}`, opts)).body;
  }

  /** PATCH /v1/schedules/{id}: `{schedule}` as it now is (enable, disable, cron, timezone, input, …). */
  async updateSchedule(id: string, body: PatchScheduleBody, opts: CallOptions = {}): Promise<ScheduleAnswer> {
    const path = `/v1/schedules/${enc(id)}`;
    return (await this.transport.json<ScheduleAnswer>("PATCH", path, { body, signal: opts.signal })).body;
  }

  /** DELETE /v1/schedules/{id}: no body (204); its jobs stay. */
  async deleteSchedule(id: string, opts: CallOptions = {}): Promise<void> {
    const res = await this.transport.send("DELETE", `/v1/schedules/${enc(id)}`, opts);
    if (!res.ok) throw await errorOf(res);
  }

  /** POST /v1/webhooks: `{webhook}` with `secret` (`whsec_…`), which no later answer shows. */
  async createWebhook(body: CreateWebhookBody, opts: CallOptions = {}): Promise<WebhookCreated> {
    return (await this.transport.json<WebhookCreated>("POST", "/v1/webhooks", { body, signal: opts.signal })).body;
  }

  /** GET /v1/webhooks: `{webhooks}`, oldest first. */
  async listWebhooks(opts: CallOptions = {}): Promise<WebhookPage> {
    return (await this.transport.json<WebhookPage>("GET", "/v1/webhooks", opts)).body;
  }

  /** GET /v1/webhooks/{id}: `{webhook}`. */
  async getWebhook(id: string, opts: CallOptions = {}): Promise<WebhookAnswer> {
    return (await this.transport.json<WebhookAnswer>("GET", `/v1/webhooks/${enc(id)}`, opts)).body;
  }

  /** DELETE /v1/webhooks/{id}: no body (204); its deliveries go with it. */
  async deleteWebhook(id: string, opts: CallOptions = {}): Promise<void> {
    const res = await this.transport.send("DELETE", `/v1/webhooks/${enc(id)}`, opts);
    if (!res.ok) throw await errorOf(res);
  }

  /** GET /v1/webhooks/{id}/deliveries: `{deliveries}`, newest first, each with its attempts. */
  async listWebhookDeliveries(
    id: string,
    query: { limit?: number } = {},
    opts: CallOptions = {},
  ): Promise<DeliveryPage> {
    const qs = query.limit === undefined ? "" : `?limit=${query.limit}`;
    return (await this.transport.json<DeliveryPage>("GET", `/v1/webhooks/${enc(id)}/deliveries${qs}`, opts)).body;
  }

  /** POST /v1/webhooks/{id}/deliveries/{delivery_id}/retry: `{delivery}`, due now, under the same webhook-id. */
  async retryWebhookDelivery(id: string, deliveryId: string, opts: CallOptions = {}): Promise<DeliveryAnswer> {
    const path = `/v1/webhooks/${enc(id)}/deliveries/${enc(deliveryId)}/retry`;
    return (await this.transport.json<DeliveryAnswer>("POST", path, opts)).body;
  }

  /** GET /v1/models: `{models}`, the ones this tenant may name, the deployment's default first. */
  async listModels(opts: CallOptions = {}): Promise<ModelList> {
    return (await this.transport.json<ModelList>("GET", "/v1/models", opts)).body;
  }

  /** GET /v1/tools: `{tools}`, the sandbox tools and the hosts' code tools an agent may list. */
  async listTools(opts: CallOptions = {}): Promise<ToolList> {
    return (await this.transport.json<ToolList>("GET", "/v1/tools", opts)).body;
  }

  /** GET /v1/usage: tokens and model calls per UTC day and model, `from` through `to` (YYYY-MM-DD, both included). */
  async usage(query: { from: string; to: string }, opts: CallOptions = {}): Promise<UsageAnswer> {
    const qs = new URLSearchParams({ from: query.from, to: query.to });
    return (await this.transport.json<UsageAnswer>("GET", `/v1/usage?${qs}`, opts)).body;
  }

  /** POST /v1/tokens (needs an API key as the credential: a token cannot mint tokens). */
  async createToken(body: CreateTokenBody = {}, opts: CallOptions = {}): Promise<TokenAnswer> {
    return (await this.transport.json<TokenAnswer>("POST", "/v1/tokens", { body, signal: opts.signal })).body;
  }
}

export type { MultitaskPolicy };

const enc = encodeURIComponent;

/** The body of a route that answers 202 for a new thing and 200 for a repeat, with which it was. */
function created<T>(res: { status: number; body: T }): Created<T> {
  return { ...res.body, created: res.status !== 200 };
}

function pageQuery(query: PageQuery): string {
  const params = new URLSearchParams();
  if (query.limit !== undefined) params.set("limit", String(query.limit));
  if (query.cursor !== undefined) params.set("cursor", query.cursor);
  return params.size > 0 ? `?${params}` : "";
}
