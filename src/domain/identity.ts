/**
 * Who may act on a job, at each step of its life: the one identity type, narrowed or widened.
 * A claim hit yields a `Claim`; the host that won it makes it a `ClaimIdentity` (what the
 * claimed-but-not-started writes are fenced by); the started CAS adds the `executionId`, and
 * every owner write after it is fenced by the full `ExecutionIdentity` (docs/architecture.md,
 * "The three identities"). The outbox needs no host: `ExecutionRef`.
 */

/** A won claim: the job, the epoch the claim raised it to, the claim's token. */
export interface Claim {
  jobId: string;
  epoch: number;
  token: string;
}

/** Who owns a claim (before start). */
export interface ClaimIdentity extends Claim {
  host: string;
}

/** Who owns a started execution. */
export interface ExecutionIdentity extends ClaimIdentity {
  executionId: string;
}

/** An execution as its events name it (the token keys its batches' mac; the host is not sent). */
export type ExecutionRef = Omit<ExecutionIdentity, "host">;
