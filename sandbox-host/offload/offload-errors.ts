/**
 * Typed errors of the offload pool. A caller can tell "the pool said no" (full, closed) from
 * "the task itself failed" (thrown in the worker, or the worker died) from "I stopped waiting"
 * from "it ran past its time bound and its thread was ended".
 */
export type OffloadErrorCode = "queue_full" | "closed" | "task_failed" | "worker_died" | "aborted" | "timeout";

export class OffloadError extends Error {
  constructor(
    readonly code: OffloadErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "OffloadError";
  }
}

/** Every worker busy and the queue at its bound: shed load instead of queueing without limit. */
export class OffloadQueueFullError extends OffloadError {
  constructor(readonly queueLimit: number) {
    super("queue_full", `offload queue is full (${queueLimit} waiting); try again later`);
    this.name = "OffloadQueueFullError";
  }
}

/** Submitted after `drain()`/`close()` began. */
export class OffloadClosedError extends OffloadError {
  constructor() {
    super("closed", "offload pool is shutting down; no new work is admitted");
    this.name = "OffloadClosedError";
  }
}

/** The caller's signal fired. A task already running keeps its slot until the worker is done. */
export class OffloadAbortedError extends OffloadError {
  constructor(
    readonly started: boolean,
    cause?: unknown,
  ) {
    super(
      "aborted",
      started ? "stopped waiting; the task still runs and holds its slot" : "aborted before the task started",
      { cause },
    );
    this.name = "OffloadAbortedError";
  }
}

/** The task threw in the worker (message and name carried over), or its worker thread died. */
export class OffloadTaskError extends OffloadError {
  constructor(
    code: "task_failed" | "worker_died",
    readonly task: string,
    message: string,
    readonly remoteName?: string,
  ) {
    super(code, `offload task ${task}: ${message}`);
    this.name = "OffloadTaskError";
  }
}

/**
 * The task ran longer than the caller's `timeoutMs`: its thread was terminated (the only way to
 * stop synchronous JavaScript, e.g. a backtracking regex), which is also what freed its slot.
 */
export class OffloadTimeoutError extends OffloadError {
  constructor(
    readonly task: string,
    readonly timeoutMs: number,
  ) {
    super("timeout", `offload task ${task} ran past its ${timeoutMs} ms bound; its thread was ended`);
    this.name = "OffloadTimeoutError";
  }
}
