/**
 * The one place an error becomes an HTTP response: ApiError → `{"error":{code,message}}` with its
 * status; anything else → 500 `internal` with a generic message, the cause logged, never sent.
 */
import type { Context, ErrorHandler, NotFoundHandler } from "hono";
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { ApiError, type ApiErrorBody, type ErrorCode } from "../../../src/contracts/errors";
import { log, loggableStack } from "../../log";
import type { GatewayEnv } from "../../types";

/** Headers an error answer carries besides its body (a 429's Retry-After). */
function errorHeaders(err: ApiError): Record<string, string> {
  return err.retryAfterS === undefined ? {} : { "retry-after": String(err.retryAfterS) };
}

export function errorResponse(c: Context, err: ApiError): Response {
  for (const [name, value] of Object.entries(errorHeaders(err))) c.header(name, value);
  return c.json(err.toBody(), err.status as ContentfulStatusCode);
}

/**
 * The same answer where there is no hono context: a Durable Object that answers a forwarded
 * request itself (a stream refused past the tenant's cap, an expired event log).
 */
export function apiErrorResponse(err: ApiError): Response {
  return Response.json(err.toBody(), { status: err.status, headers: errorHeaders(err) });
}

/** hono throws HTTPException for its own failures (e.g. a malformed URL); keep their status. */
function fromHttpException(err: HTTPException): ApiError {
  const byStatus: Partial<Record<number, ErrorCode>> = {
    400: "invalid_request",
    401: "unauthorized",
    404: "not_found",
    413: "payload_too_large",
    415: "unsupported_media_type",
  };
  const code = byStatus[err.status];
  return code ? new ApiError(code, err.message || code.replace(/_/g, " ")) : internalError(err);
}

function internalError(cause: unknown): ApiError {
  return new ApiError("internal", "internal error; the request was not completed", { cause });
}

/**
 * Bodies up to this size are read to the end before an error answer that left them unread (a
 * refused key or token, a missing route). workerd closes a connection whose request body was not
 * consumed, without a `Connection: close` header, so a keep-alive client (undici, a browser)
 * that sends its next request on the pooled socket gets ECONNRESET whenever it races the close:
 * measured, 201 of 300 requests after a refused POST. A larger body is left unread and its
 * connection closed, rather than read to answer an error.
 */
const DRAIN_MAX_BYTES = 64 * 1024;

async function drainUnreadBody(req: Request): Promise<void> {
  if (req.bodyUsed || req.body === null) return;
  const length = Number(req.headers.get("content-length"));
  if (!Number.isFinite(length) || length <= 0 || length > DRAIN_MAX_BYTES) return;
  // A client that went away mid-body is no reason to fail the answer.
  await req.arrayBuffer().catch(() => {});
}

export const handleError: ErrorHandler<GatewayEnv> = async (err, c) => {
  const apiError =
    err instanceof ApiError ? err : err instanceof HTTPException ? fromHttpException(err) : internalError(err);
  if (apiError.status >= 500) {
    (apiError.status === 500 ? log.error : log.warn)("request failed", {
      method: c.req.method,
      path: c.req.path,
      code: apiError.code,
      error: apiError.cause ?? err,
      stack: loggableStack(apiError.cause ?? err),
    });
  }
  await drainUnreadBody(c.req.raw);
  return errorResponse(c, apiError);
};

export const handleNotFound: NotFoundHandler<GatewayEnv> = async (c) => {
  await drainUnreadBody(c.req.raw);
  const body: ApiErrorBody = { error: { code: "not_found", message: `no route for ${c.req.method} ${c.req.path}` } };
  return c.json(body, 404);
};
