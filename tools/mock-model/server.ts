/**
 * An OpenAI-compatible model server for local dev, tests and load runs: scripted answers
 * (script.ts), a concurrency cap that answers 429 like a provider's, and counters that let a
 * test prove a global quota never over-admitted (slots.ts), plus a log of recent requests that
 * says which run made each one (request-log.ts). Loopback, no dependencies beyond node:http.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { z } from "zod";
import { type AnswerOutcome, respondAnswer, streamAnswer } from "./answer";
import { type LoggedRequest, RequestLog, type RequestOutcome } from "./request-log";
import { type CompletionRequest, CompletionRequestSchema, planAnswer, ScriptError, textOf } from "./script";
import { type MockStats, type OverCapPolicy, SlotTable } from "./slots";

export interface MockModelOptions {
  host?: string;
  /** 0 (default) lets the kernel pick a free port. */
  port?: number;
  /** null/undefined: no cap. */
  maxConcurrency?: number | null;
  /** What an over-cap request gets: 429 ("reject", default) or served and counted as a violation. */
  overCap?: OverCapPolicy;
  defaultTtftMs?: number;
  /** 0 = unpaced. */
  defaultTokensPerS?: number;
  /** When set, /v1/* requires `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /**
   * This fraction (0…1) of chat requests fails before any output, each with a status drawn from
   * `failStatuses` (default 429 and 503, equally): a flaky provider for retry measurements.
   */
  failRate?: number;
  failStatuses?: number[];
  /** The Retry-After (seconds) an injected 429 carries; none when unset. */
  failRetryAfterS?: number;
  /** The random source of failure injection (tests pass a seeded one). */
  random?: () => number;
}

/** Failures injected and usage reported, for comparing a run's own records with what the provider said. */
export interface ProviderLedger {
  injected_failures: Record<string, number>;
  usage_reported: { calls: number; prompt_tokens: number; completion_tokens: number };
}

export interface MockModel {
  /** Base URL ending in /v1, for an OpenAI client's baseURL. */
  url: string;
  port: number;
  stats(): MockStats & ProviderLedger;
  /** The recent completion requests (request-log.ts), optionally only those mentioning `contains`. */
  requests(contains?: string): LoggedRequest[];
  /** Zeroes the counters and clears the request log. */
  reset(): void;
  setMaxConcurrency(n: number | null, overCap?: OverCapPolicy): void;
  close(): Promise<void>;
}

export const MOCK_MODEL_NAME = "mock-model";
const MAX_BODY_BYTES = 8 * 1024 * 1024;
/** Defaults that keep tests fast; the load generator passes 200 ms / 50 tokens/s. */
const DEFAULT_TTFT_MS = 0;
const DEFAULT_TOKENS_PER_S = 1000;

const ControlSchema = z
  .object({
    max_concurrency: z.number().int().min(0).nullable().optional(),
    over_cap: z.enum(["reject", "admit"]).optional(),
    fail_rate: z.number().min(0).max(1).optional(),
  })
  .strict();

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type = "invalid_request_error",
    readonly code: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

function sendError(res: ServerResponse, err: HttpError): void {
  sendJson(
    res,
    err.status,
    { error: { message: err.message, type: err.type, param: null, code: err.code } },
    err.headers,
  );
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const part of req as AsyncIterable<Buffer>) {
    size += part.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, `request body exceeds ${MAX_BODY_BYTES} bytes`);
    parts.push(part);
  }
  const text = Buffer.concat(parts).toString("utf8");
  if (text.trim() === "") return {};
  try {
    return JSON.parse(text);
  } catch {
    throw new HttpError(400, "request body is not valid JSON");
  }
}

export async function startMockModel(opts: MockModelOptions = {}): Promise<MockModel> {
  const host = opts.host ?? "127.0.0.1";
  const defaults = {
    ttftMs: opts.defaultTtftMs ?? DEFAULT_TTFT_MS,
    tokensPerS: opts.defaultTokensPerS ?? DEFAULT_TOKENS_PER_S,
  };
  const slots = new SlotTable(opts.maxConcurrency ?? null, opts.overCap ?? "reject");
  let failRate = opts.failRate ?? 0;
  const failStatuses = opts.failStatuses?.length ? opts.failStatuses : [429, 503];
  const random = opts.random ?? Math.random;
  const emptyLedger = (): ProviderLedger => ({
    injected_failures: {},
    usage_reported: { calls: 0, prompt_tokens: 0, completion_tokens: 0 },
  });
  let ledger = emptyLedger();
  const stats = () => ({ ...slots.stats(), ...ledger });
  /** An injected failure for this request, or null (drawn per request, before any output). */
  function injectedFailure(): HttpError | null {
    if (failRate <= 0 || random() >= failRate) return null;
    const status = failStatuses[Math.floor(random() * failStatuses.length)] ?? 503;
    ledger.injected_failures[status] = (ledger.injected_failures[status] ?? 0) + 1;
    const headers: Record<string, string> =
      status === 429 && opts.failRetryAfterS !== undefined ? { "retry-after": String(opts.failRetryAfterS) } : {};
    return status === 429
      ? new HttpError(429, "Rate limit reached (injected by the mock).", "requests", "rate_limit_exceeded", headers)
      : new HttpError(status, `The server is overloaded (injected ${status}).`, "server_error", null, headers);
  }
  const requestLog = new RequestLog();
  let seq = 0;
  const nextId = (prefix: string) => () => `${prefix}${(++seq).toString(36)}`;

  function authorize(req: IncomingMessage): void {
    if (opts.apiKey === undefined) return;
    if (req.headers.authorization !== `Bearer ${opts.apiKey}`) {
      throw new HttpError(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key");
    }
  }

  async function completions(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const parsed = CompletionRequestSchema.safeParse(await readJson(req));
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ");
      throw new HttpError(400, `invalid chat completion request: ${issues}`);
    }
    const body = parsed.data;
    const ended = requestLog.add(body.messages.filter((m) => m.role === "user").map(textOf), body.messages.length);
    try {
      await answer(body, res, ended);
    } finally {
      ended("error");
    }
  }

  async function answer(
    body: CompletionRequest,
    res: ServerResponse,
    ended: (outcome: Exclude<RequestOutcome, "in_flight">) => void,
  ): Promise<void> {
    let plan: ReturnType<typeof planAnswer>;
    try {
      plan = planAnswer(body, defaults, nextId("call_mock_"));
    } catch (err) {
      if (err instanceof ScriptError)
        throw new HttpError(400, err.message, "invalid_request_error", "invalid_mock_script");
      throw err;
    }
    if (plan.kind === "error") throw new HttpError(plan.status, plan.message, plan.type, plan.code);
    const injected = injectedFailure();
    if (injected) throw injected;

    const slot = slots.tryAdmit();
    if (!slot) {
      ended("rejected_429");
      // Not counted in `errors`: rejected_429 is its own counter.
      sendJson(
        res,
        429,
        {
          error: {
            message: `Rate limit reached: ${slots.stats().cap} concurrent requests (mock cap).`,
            type: "requests",
            param: null,
            code: "rate_limit_exceeded",
          },
        },
        { "retry-after": "1" },
      );
      return;
    }

    const abort = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) abort.abort();
    };
    res.on("close", onClose);
    const ctx = {
      id: nextId("chatcmpl-mock-")(),
      model: body.model ?? MOCK_MODEL_NAME,
      includeUsage: body.stream_options?.include_usage === true,
      signal: abort.signal,
      startedAt: performance.now(),
      onUsage: (u: { prompt_tokens: number; completion_tokens: number }) => {
        ledger.usage_reported.calls++;
        ledger.usage_reported.prompt_tokens += u.prompt_tokens;
        ledger.usage_reported.completion_tokens += u.completion_tokens;
      },
    };
    let outcome: AnswerOutcome | "aborted" | "error" = "error";
    try {
      outcome = body.stream ? await streamAnswer(res, plan, ctx) : await respondAnswer(res, plan, ctx);
    } catch (err) {
      if (!abort.signal.aborted) throw err;
      outcome = "aborted";
    } finally {
      res.off("close", onClose);
      slot.release(outcome);
      ended(outcome);
    }
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0];
    const route = `${req.method} ${path}`;
    if (route === "POST /v1/chat/completions") slots.countRequest();
    if (path?.startsWith("/v1/")) authorize(req);
    switch (route) {
      case "POST /v1/chat/completions":
        return completions(req, res);
      case "GET /v1/models":
        return sendJson(res, 200, {
          object: "list",
          data: [{ id: MOCK_MODEL_NAME, object: "model", created: 0, owned_by: "mock" }],
        });
      case "GET /healthz":
        return sendJson(res, 200, { ok: true });
      case "GET /stats":
        return sendJson(res, 200, stats());
      case "GET /requests":
        return sendJson(res, 200, {
          requests: requestLog.list(new URL(req.url ?? "/", "http://mock").searchParams.get("contains") ?? undefined),
        });
      case "POST /stats/reset":
        slots.reset();
        requestLog.reset();
        ledger = emptyLedger();
        return sendJson(res, 200, stats());
      case "POST /control": {
        const parsed = ControlSchema.safeParse(await readJson(req));
        if (!parsed.success) {
          throw new HttpError(400, "expected {max_concurrency?: int|null, over_cap?: reject|admit, fail_rate?: 0..1}");
        }
        if (parsed.data.fail_rate !== undefined) failRate = parsed.data.fail_rate;
        if (parsed.data.max_concurrency !== undefined || parsed.data.over_cap) {
          const cap = parsed.data.max_concurrency === undefined ? slots.stats().cap : parsed.data.max_concurrency;
          slots.setCap(cap, parsed.data.over_cap);
        }
        return sendJson(res, 200, stats());
      }
      default:
        throw new HttpError(404, `no route for ${route}`, "invalid_request_error", "unknown_url");
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!(err instanceof HttpError)) console.error("[mock-model]", err);
      if (req.url?.startsWith("/v1/chat/completions")) slots.countError();
      sendError(res, err instanceof HttpError ? err : new HttpError(500, "mock model internal error", "server_error"));
    });
  });
  server.keepAliveTimeout = 5_000;

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const urlHost = host.includes(":") ? `[${host}]` : host;

  return {
    url: `http://${urlHost}:${port}/v1`,
    port,
    stats,
    requests: (contains) => requestLog.list(contains),
    reset: () => {
      slots.reset();
      requestLog.reset();
      ledger = emptyLedger();
    },
    setMaxConcurrency: (n, overCap) => slots.setCap(n, overCap),
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        // In-flight streams end with their sockets; their slots are released by the 'close' path.
        server.closeAllConnections();
      }),
  };
}
