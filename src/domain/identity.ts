/**
 * Who may act on a job: one identity, made when a host wins a claim and carried unchanged to the
 * run's last write (docs/architecture.md, "The three identities"). A claim statement answers
 * with `Claim` rows (job, the epoch the claim raised it to, the claim's token); the host that won
 * one makes it its `ExecutionIdentity` at once by adding itself and the id its execution will
 * have. The started CAS writes that id into the row; every owner write after it is fenced by the
 * whole identity, and the claimant's cancel before it by the claim part (the row names no
 * execution yet). The outbox reads the part its events carry: `ExecutionRef`.
 */

/** A won claim, as the claim statement returns it: the job, the epoch it raised, its token. */
export interface Claim {
  jobId: string;
  epoch: number;
  token: string;
}

/** The run's identity from its claim on: the claim, the host that won it, its execution's id. */
export interface ExecutionIdentity extends Claim {
  host: string;
  /** Picked with the claim; in the row from the started CAS on (a missed start never uses it). */
  executionId: string;
}

/** What the outbox reads of an identity (the token keys its batches' mac; the host is not sent). */
export type ExecutionRef = Omit<ExecutionIdentity, "host">;
