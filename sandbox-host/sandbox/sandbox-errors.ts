/**
 * Typed sandbox errors. A run that needs a sandbox and cannot get one fails with one of these —
 * there is never a fallback to the host's filesystem or shell. `isRunFatal` tells the agent loop
 * which errors end the run (infrastructure) and which go back to the model as a tool error.
 */
export type SandboxErrorCode =
  | "pool_exhausted"
  | "create_failed"
  | "delete_failed"
  | "delete_timeout"
  | "sandbox_gone"
  | "exec_failed"
  | "path_outside_workspace"
  | "not_found"
  | "not_a_file"
  | "not_a_directory"
  | "too_large"
  | "invalid_input"
  | "invalid_config";

export class SandboxError extends Error {
  readonly code: SandboxErrorCode;
  readonly runId: string | null;
  constructor(code: SandboxErrorCode, message: string, options?: { cause?: unknown; runId?: string }) {
    super(message, { cause: options?.cause });
    this.name = "SandboxError";
    this.code = code;
    this.runId = options?.runId ?? null;
  }
}

export class SandboxPoolExhausted extends SandboxError {
  constructor(pool: string, subnetPrefix: number, runId: string) {
    super(
      "pool_exhausted",
      `sandbox network pool ${pool} has no free /${subnetPrefix} left (every subnet is held by a Docker network)`,
      { runId },
    );
    this.name = "SandboxPoolExhausted";
  }
}

/** True for errors that must end the run; the rest are the model's mistakes, returned as tool errors. */
export function isRunFatal(err: unknown): boolean {
  if (!(err instanceof SandboxError)) return true;
  switch (err.code) {
    case "pool_exhausted":
    case "create_failed":
    case "delete_failed":
    case "delete_timeout":
    case "sandbox_gone":
    case "exec_failed":
    case "invalid_config":
      return true;
    case "path_outside_workspace":
    case "not_found":
    case "not_a_file":
    case "not_a_directory":
    case "too_large":
    case "invalid_input":
      return false;
  }
}
