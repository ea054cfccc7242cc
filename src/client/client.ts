/**
 * The typed client of the public API (docs/api.md): jobs, cancel and input, the event stream as
 * a resuming async iterator, the chat WebSocket with resume, and access tokens. Runtime-neutral
 * (fetch, WebSocket, TextDecoder, AbortSignal only) so the console, the demo, the load tool and
 * the tests all use this one. Request and answer types are the zod contracts' (src/contracts/);
 * answers are not re-validated here: the gateway builds them from the same schemas.
 *
 *   const api = new EarClient({ baseUrl, credential: apiKey });
 *   const { job } = await api.submit({ input: { messages: [{ role: "user", content: "hi" }] } });
 *   for await (const { event } of api.events(job.id)) console.log(event.type);
 */

import type { z } from "zod";
import { ACCESS_TOKEN_PARAM, looksLikeAccessToken } from "../contracts/access";
import type { AgentDefinitionInput, AgentView, CreateAgentBody } from "../contracts/agent";
import type { AgentPageSchema, AgentVersionPageSchema, ModelViewSchema, UsageAnswerSchema } from "../contracts/catalog";
import type { ConversationMessage, MultitaskPolicy } from "../contracts/chat";
import type { CancelOutcome, CreateJobBody, InputStatus, JobState, JobView, LatencyView } from "../contracts/job";
import type { CreateTokenBody, TokenAnswer } from "../contracts/tokens";
import type { ApprovalAnswer, ApprovalBody } from "../contracts/wait";
import { ChatConnection, type ChatOptions, type WebSocketConstructor } from "./chat";
import { type FollowOptions, followEvents, type StreamedEvent } from "./events";
import { type Credential, Transport } from "./http";

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

export interface SubmitResult {
  job: JobView;
  /** false when `idempotency_key` named a job this tenant had already created (HTTP 200, not 202). */
  created: boolean;
}

export interface ListQuery {
  state?: JobState;
  limit?: number;
  cursor?: string;
}

export interface JobPage {
  jobs: JobView[];
  next_cursor: string | null;
}

export interface InputResult {
  input_id: string;
  status: InputStatus;
}

export interface InputView extends InputResult {
  content: string;
  created_at: string;
  accepted_at: string | null;
  applied_at: string | null;
}

export interface PageQuery {
  limit?: number;
  cursor?: string;
}

/** GET /v1/agents: live agents at their latest versions, by name. */
export type AgentPage = z.infer<typeof AgentPageSchema>;
/** GET /v1/agents/{name}/versions: newest first. */
export type AgentVersionPage = z.infer<typeof AgentVersionPageSchema>;
export type ModelView = z.infer<typeof ModelViewSchema>;
export type UsageAnswer = z.infer<typeof UsageAnswerSchema>;
/** POST /v1/agents as a client writes it: the name plus the definition, defaults not yet applied. */
export type CreateAgentInput = { name: CreateAgentBody["name"] } & AgentDefinitionInput;

export type { AgentDefinitionInput, AgentView, LatencyView, StreamedEvent };

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

  /** POST /v1/jobs. */
  async submit(body: CreateJobBody, opts: CallOptions = {}): Promise<SubmitResult> {
    const res = await this.transport.json<{ job: JobView }>("POST", "/v1/jobs", { body, signal: opts.signal });
    return { job: res.body.job, created: res.status === 202 };
  }

  /** GET /v1/jobs/{id}. */
  async get(jobId: string, opts: CallOptions = {}): Promise<JobView> {
    return (await this.transport.json<{ job: JobView }>("GET", `/v1/jobs/${enc(jobId)}`, opts)).body.job;
  }

  /** GET /v1/jobs: one page, newest first; pass `next_cursor` back as `cursor` for the next. */
  async list(query: ListQuery = {}, opts: CallOptions = {}): Promise<JobPage> {
    const params = new URLSearchParams();
    if (query.state !== undefined) params.set("state", query.state);
    if (query.limit !== undefined) params.set("limit", String(query.limit));
    if (query.cursor !== undefined) params.set("cursor", query.cursor);
    const qs = params.size > 0 ? `?${params}` : "";
    return (await this.transport.json<JobPage>("GET", `/v1/jobs${qs}`, opts)).body;
  }

  /** POST /v1/jobs/{id}/cancel. */
  async cancel(jobId: string, opts: CallOptions = {}): Promise<CancelOutcome> {
    const res = await this.transport.json<{ status: CancelOutcome }>("POST", `/v1/jobs/${enc(jobId)}/cancel`, opts);
    return res.body.status;
  }

  /** POST /v1/jobs/{id}/input. */
  async input(
    jobId: string,
    body: { content: string; idempotency_key?: string },
    opts: CallOptions = {},
  ): Promise<InputResult> {
    const path = `/v1/jobs/${enc(jobId)}/input`;
    return (await this.transport.json<InputResult>("POST", path, { body, signal: opts.signal })).body;
  }

  /**
   * POST /v1/jobs/{id}/approvals/{call_id}: approve or deny the tool call a waiting job waits on.
   * `created` is false when the call was already decided the same way (the recorded decision).
   */
  async decide(
    jobId: string,
    callId: string,
    body: ApprovalBody,
    opts: CallOptions = {},
  ): Promise<{ answer: ApprovalAnswer; created: boolean }> {
    const path = `/v1/jobs/${enc(jobId)}/approvals/${enc(callId)}`;
    const res = await this.transport.json<ApprovalAnswer>("POST", path, { body, signal: opts.signal });
    return { answer: res.body, created: res.status === 202 };
  }

  /** GET /v1/jobs/{id}/inputs. */
  async inputs(jobId: string, opts: CallOptions = {}): Promise<InputView[]> {
    const res = await this.transport.json<{ inputs: InputView[] }>("GET", `/v1/jobs/${enc(jobId)}/inputs`, opts);
    return res.body.inputs;
  }

  /**
   * GET /v1/jobs/{id}/events as an async iterator: every event after `after` exactly once, across
   * dropped connections (resumed with Last-Event-ID), ending after the terminal event or when
   * the server answers 204 (finished, nothing after the cursor). See events.ts.
   */
  events(jobId: string, opts: FollowOptions = {}): AsyncGenerator<StreamedEvent, void, undefined> {
    return followEvents(this.transport, jobId, opts);
  }

  /** GET /v1/conversations/{id}/messages. */
  async messages(conversationId: string, opts: CallOptions = {}): Promise<ConversationMessage[]> {
    const path = `/v1/conversations/${enc(conversationId)}/messages`;
    return (await this.transport.json<{ messages: ConversationMessage[] }>("GET", path, opts)).body.messages;
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

  /** POST /v1/agents: version 1 of a new agent. */
  async createAgent(body: CreateAgentInput, opts: CallOptions = {}): Promise<AgentView> {
    return (await this.transport.json<{ agent: AgentView }>("POST", "/v1/agents", { body, signal: opts.signal })).body
      .agent;
  }

  /** GET /v1/agents: one page of live agents by name; pass `next_cursor` back as `cursor`. */
  async listAgents(query: PageQuery = {}, opts: CallOptions = {}): Promise<AgentPage> {
    return (await this.transport.json<AgentPage>("GET", `/v1/agents${pageQuery(query)}`, opts)).body;
  }

  /** GET /v1/agents/{name}: the latest version (archived agents too, with `archived_at`). */
  async getAgent(name: string, opts: CallOptions = {}): Promise<AgentView> {
    return (await this.transport.json<{ agent: AgentView }>("GET", `/v1/agents/${enc(name)}`, opts)).body.agent;
  }

  /** GET /v1/agents/{name}/versions: one page, newest first. */
  async listAgentVersions(name: string, query: PageQuery = {}, opts: CallOptions = {}): Promise<AgentVersionPage> {
    const path = `/v1/agents/${enc(name)}/versions${pageQuery(query)}`;
    return (await this.transport.json<AgentVersionPage>("GET", path, opts)).body;
  }

  /** GET /v1/agents/{name}/versions/{version}. */
  async getAgentVersion(name: string, version: number, opts: CallOptions = {}): Promise<AgentView> {
    const path = `/v1/agents/${enc(name)}/versions/${enc(String(version))}`;
    return (await this.transport.json<{ agent: AgentView }>("GET", path, opts)).body.agent;
  }

  /** POST /v1/agents/{name}/versions: the whole next definition (a version is never patched). */
  async createAgentVersion(name: string, body: AgentDefinitionInput, opts: CallOptions = {}): Promise<AgentView> {
    const path = `/v1/agents/${enc(name)}/versions`;
    return (await this.transport.json<{ agent: AgentView }>("POST", path, { body, signal: opts.signal })).body.agent;
  }

  /** POST /v1/agents/{name}/archive: the latest version with `archived_at` set (repeating it is harmless). */
  async archiveAgent(name: string, opts: CallOptions = {}): Promise<AgentView> {
    const path = `/v1/agents/${enc(name)}/archive`;
    return (await this.transport.json<{ agent: AgentView }>("POST", path, opts)).body.agent;
  }

  /** GET /v1/models: the models this tenant may name. */
  async listModels(opts: CallOptions = {}): Promise<ModelView[]> {
    return (await this.transport.json<{ models: ModelView[] }>("GET", "/v1/models", opts)).body.models;
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

function pageQuery(query: PageQuery): string {
  const params = new URLSearchParams();
  if (query.limit !== undefined) params.set("limit", String(query.limit));
  if (query.cursor !== undefined) params.set("cursor", query.cursor);
  return params.size > 0 ? `?${params}` : "";
}
