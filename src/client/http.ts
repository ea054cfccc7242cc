/**
 * The client's transport: one `fetch` per call with the credential as a Bearer header, and the
 * API's error shape (`{"error": {code, message}}`) turned into one error class. Runtime-neutral:
 * only fetch, Headers and AbortSignal, so it runs in browsers, Node ≥ 20, Deno and Workers.
 */
import type { ErrorCode } from "../contracts/errors";

/** An API key or an access token, or a function giving the current one (called per request, so a token can be refreshed). */
export type Credential = string | (() => string | Promise<string>);

export interface TransportOptions {
  /** The gateway's origin and optional path prefix, e.g. `https://api.example.com` (no trailing slash needed). */
  baseUrl: string;
  credential?: Credential;
  /** Defaults to the global fetch. */
  fetch?: typeof fetch;
}

/** A non-2xx answer of the API. `code` is the API's error code (or `http_<status>` when the body was not the error shape). */
export class ApiClientError extends Error {
  readonly status: number;
  readonly code: ErrorCode | `http_${number}`;
  /** Seconds from a `Retry-After` header (429, some 503s), else undefined. */
  readonly retryAfterS: number | undefined;
  constructor(status: number, code: ErrorCode | `http_${number}`, message: string, retryAfterS?: number) {
    super(`${status} ${code}: ${message}`);
    this.name = "ApiClientError";
    this.status = status;
    this.code = code;
    this.retryAfterS = retryAfterS;
  }
}

export class Transport {
  readonly baseUrl: string;
  private readonly credential: Credential | undefined;
  private readonly fetchImpl: typeof fetch;

  constructor(opts: TransportOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, "");
    this.credential = opts.credential;
    // Bound: a bare `fetch` reference called as a method throws "Illegal invocation" in browsers.
    this.fetchImpl = opts.fetch ?? ((input, init) => fetch(input, init));
  }

  async currentCredential(): Promise<string | undefined> {
    return typeof this.credential === "function" ? await this.credential() : this.credential;
  }

  /** The raw response of one request; errors of the network propagate, HTTP statuses do not. */
  async send(
    method: string,
    path: string,
    init: { body?: unknown; headers?: Record<string, string>; signal?: AbortSignal } = {},
  ): Promise<Response> {
    const headers: Record<string, string> = { ...init.headers };
    const credential = await this.currentCredential();
    if (credential !== undefined) headers.authorization = `Bearer ${credential}`;
    let body: string | undefined;
    if (init.body !== undefined) {
      body = JSON.stringify(init.body);
      headers["content-type"] = "application/json";
    }
    return this.fetchImpl(`${this.baseUrl}${path}`, { method, headers, body, signal: init.signal });
  }

  /** A JSON call: the parsed body of a 2xx answer, else an ApiClientError. */
  async json<T>(
    method: string,
    path: string,
    init: { body?: unknown; signal?: AbortSignal } = {},
  ): Promise<{ status: number; body: T }> {
    const res = await this.send(method, path, init);
    if (!res.ok) throw await errorOf(res);
    return { status: res.status, body: (await res.json()) as T };
  }
}

/** The ApiClientError for a non-2xx response (its body is consumed). */
export async function errorOf(res: Response): Promise<ApiClientError> {
  const text = await res.text().catch(() => "");
  const retry = res.headers.get("retry-after");
  const retryAfterS = retry !== null && /^\d+$/.test(retry) ? Number(retry) : undefined;
  try {
    const parsed = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
    if (typeof parsed.error?.code === "string" && typeof parsed.error.message === "string") {
      return new ApiClientError(res.status, parsed.error.code as ErrorCode, parsed.error.message, retryAfterS);
    }
  } catch {
    // not JSON: fall through to the status alone
  }
  return new ApiClientError(res.status, `http_${res.status}`, text.slice(0, 300) || res.statusText, retryAfterS);
}
