/**
 * The closed set of error codes the public API returns, with the HTTP status each maps to.
 * One table, read by the gateway's single error handler, so a code can never drift from its status.
 */
import { z } from "zod";

export const ERROR_STATUS = {
  invalid_json: 400,
  invalid_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  idempotency_mismatch: 409,
  input_limit_reached: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  internal: 500,
  dependency_unavailable: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** The codes of ERROR_STATUS as a list (for schemas); the table stays the one home. */
export const ERROR_CODES = Object.keys(ERROR_STATUS) as [ErrorCode, ...ErrorCode[]];

/** Every error answer of the API: `{"error": {"code", "message"}}`, never a stack trace. */
export const ErrorBodySchema = z.object({ error: z.object({ code: z.enum(ERROR_CODES), message: z.string() }) });
export type ApiErrorBody = z.infer<typeof ErrorBodySchema>;

/** A typed error that crosses a boundary: code + human message (+ cause for logs, never sent). */
export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Whole seconds (≥ 1) for a `Retry-After` header; set on `rate_limited`. */
  readonly retryAfterS: number | undefined;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; retryAfterS?: number }) {
    super(message, options);
    this.name = "ApiError";
    this.code = code;
    this.status = ERROR_STATUS[code];
    this.retryAfterS = options?.retryAfterS === undefined ? undefined : Math.max(1, Math.ceil(options.retryAfterS));
  }
  toBody(): ApiErrorBody {
    return { error: { code: this.code, message: this.message } };
  }
}
