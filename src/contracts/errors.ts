/**
 * The closed set of error codes the public API returns, with the HTTP status each maps to.
 * One table, read by the gateway's single error handler, so a code can never drift from its status.
 */
export const ERROR_STATUS = {
  invalid_json: 400,
  invalid_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  internal: 500,
  dependency_unavailable: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export interface ApiErrorBody {
  error: { code: ErrorCode | string; message: string };
}

/** A typed error that crosses a boundary: code + human message (+ cause for logs, never sent). */
export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ApiError";
    this.code = code;
    this.status = ERROR_STATUS[code];
  }
  toBody(): ApiErrorBody {
    return { error: { code: this.code, message: this.message } };
  }
}
