/** Child jobs and delegate-turn suspensions as the host builds them, for tests of the children wait in Postgres. */
import { randomUUID } from "node:crypto";
import type { ChildJob, Suspension } from "../../src/db/wait-repo";

/** A child job of agent `worker@1` answering delegate call `callId`. */
export const childJob = (callId: string): ChildJob => ({
  id: randomUUID(),
  callId,
  agentName: "worker",
  agentVersion: 1,
  model: "m",
  tools: [],
  timeoutMs: null,
  input: `task ${callId}`,
});

/** The suspension of a turn whose delegate calls create `children` (the first call is the wait's). */
export const delegateWait = (children: ChildJob[]): Suspension => ({
  kind: "children",
  callId: children[0]?.callId as string,
  tool: "delegate_worker",
  arguments: { input: "x" },
  question: null,
  deadlineS: 3600,
  onDeadline: "fail",
  checkpoint: { v: 1 },
  children,
});
