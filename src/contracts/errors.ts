/**
 * The closed sets of error codes: the codes the public API answers with, each with its HTTP
 * status (one table, read by the gateway's single error handler, so a code can never drift from
 * its status), and the codes a job can end with (`JOB_ERROR_CODES`, below).
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
  /** The tenant's cap on agents, versions per agent or definition bytes (docs/limits.md). */
  agent_limit_reached: 409,
  /** The retention purge deleted the job (docs/architecture.md "Retention"). */
  gone: 410,
  /** The job is kept but its event log passed its retention and was deleted. */
  events_expired: 410,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  /** The tenant's daily budget is spent (docs/quota.md, "Daily budgets"); Retry-After: the next UTC midnight. */
  budget_exceeded: 429,
  internal: 500,
  dependency_unavailable: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** The codes of ERROR_STATUS as a list (for schemas); the table stays the one home. */
export const ERROR_CODES = Object.keys(ERROR_STATUS) as [ErrorCode, ...ErrorCode[]];

/**
 * The model provider's failures as a run reports them (sandbox-host/model: `ModelError.code`);
 * `aborted` is also the run's own code for an abort with no more specific reason.
 */
export const MODEL_ERROR_CODES = [
  "rate_limited",
  "provider_error",
  "network_error",
  "aborted",
  "bad_response",
] as const;
export type ModelErrorCode = (typeof MODEL_ERROR_CODES)[number];

/**
 * The closed set of `job.error.code` values (also the `error` of `run.failed`, `run.lost`,
 * `run.timed_out` and of a failing `tool.result`): why a job ended without an answer. Not HTTP
 * answers: a job's failure is a fact of the job, read with a 200. Who writes each code and when
 * is tabled in docs/api.md ("Job error codes").
 */
export const JOB_ERROR_CODES = [
  // Postgres writes these (src/db: the cancel, claim-release and reaper statements).
  "cancelled",
  "lost",
  "timed_out",
  // Not started within its ttl_s (src/db/admission-repo.ts, every host's reaper).
  "expired",
  // The host's run (sandbox-host/runner/run-job.ts).
  ...MODEL_ERROR_CODES,
  "model_not_allowed",
  "quota_unavailable",
  "quota_lease_lost",
  // The tenant's daily budget was spent when the run was about to call the model again.
  "budget_exceeded",
  "tools_unavailable",
  "too_many_turns",
  // The answer did not satisfy the agent's response_format, even after one repair turn.
  "output_invalid",
  "sandbox_error",
  "tool_error",
  "host_shutdown",
  "ownership_lost",
  // A wait for an approval or an answer passed the agent's deadline with on_deadline "fail"
  // (src/db/wait-repo.ts, run by every host's reaper and the Worker's cron backstop).
  "approval_expired",
  "internal_error",
] as const;
export type JobErrorCode = (typeof JOB_ERROR_CODES)[number];

/** Every error answer of the API: `{"error": {"code", "message"}}`, never a stack trace. */
export const ErrorBodySchema = z.object({ error: z.object({ code: z.enum(ERROR_CODES), message: z.string() }) });
export type ApiErrorBody = z.infer<typeof ErrorBodySchema>;

/** A typed error that crosses a boundary: code + human message (+ cause for logs, never sent). */
export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Whole seconds (≥ 1) for a `Retry-After` header; set on `rate_limited` and `budget_exceeded`. */
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
