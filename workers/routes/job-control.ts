/**
 * The control path of a job: durable first,
 * fast hint second. Cancel commits in Postgres (a queued, unclaimed job is cancelled right there),
 * then sets a Redis hint key with a TTL that the owning host reads in its ~200 ms batched check;
 * without Redis the host's ~1 s durable check still converges. Input is stored in Postgres and
 * applied by the owner at its next model turn; its status is readable. A waiting job is resumed
 * by a decision on the call it waits on (approvals) or, for ask_user, by input.
 */
import { CancelAnswerSchema, InputAnswerSchema, InputListSchema, JobInputBodySchema } from "../../src/contracts/job";
import { BODY_ERRORS, callIdParam, jobIdParam, V1_ERRORS } from "../../src/contracts/openapi";
import { ApprovalAnswerSchema, ApprovalBodySchema } from "../../src/contracts/wait";
import { listInputs, submitInput } from "../../src/db/control-repo";
import { cancelJob } from "../commands/cancel";
import { decide, wakeHosts } from "../commands/decide";
import { callDependency } from "../deps";
import { missingJob } from "./jobs";
import { route, routes } from "./route";

/** A decision's answers and errors, one declaration for both routes that take one (this and the conversation's). */
export const APPROVAL_RESPONSES = [
  { status: 202, description: "Recorded; the job is re-queued.", schema: ApprovalAnswerSchema },
  {
    status: 200,
    description: "Already decided the same way: the recorded decision.",
    schema: ApprovalAnswerSchema,
  },
];
export const APPROVAL_ERRORS = ["not_found", "gone", ...BODY_ERRORS, "conflict", ...V1_ERRORS] as const;

export const jobControlRoutes = routes(
  route({
    method: "post",
    path: "/:id/cancel",
    operationId: "cancelJob",
    tag: "jobs",
    summary: "Cancel a job (no body)",
    description: "Committed in Postgres first; a claimed or running job's owner then stops it. Repeating is harmless.",
    auth: "bearer",
    parameters: [jobIdParam],
    responses: [{ status: 202, description: "What the cancel did.", schema: CancelAnswerSchema }],
    errors: ["not_found", "gone", ...V1_ERRORS],
    handler: async (c) => {
      const status = await cancelJob(c.get("deps"), c.get("tenantId"), c.req.param("id"), (hint) =>
        c.executionCtx.waitUntil(hint),
      );
      if (status === "not_found") throw await missingJob(c.get("deps").db(), c.get("tenantId"), c.req.param("id"));
      return c.json({ status }, 202);
    },
  }),
  route({
    method: "post",
    path: "/:id/input",
    operationId: "sendJobInput",
    tag: "jobs",
    summary: "Send a user message to a queued, running or waiting job",
    description:
      "Its owner applies it at the next model-turn boundary. To a job waiting on `ask_user` it is the answer: the job is re-queued and resumes with it as the tool result.",
    auth: "bearer",
    parameters: [jobIdParam],
    body: JobInputBodySchema,
    responses: [
      { status: 202, description: "Stored (`already_finished` if the job had ended).", schema: InputAnswerSchema },
      {
        status: 200,
        description: "The `idempotency_key` was used before on this job: that input, with its current status.",
        schema: InputAnswerSchema,
      },
    ],
    errors: ["not_found", "gone", ...BODY_ERRORS, "idempotency_mismatch", "input_limit_reached", ...V1_ERRORS],
    handler: async (c, input) => {
      const body = await input.body();
      const db = c.get("deps").db();
      const result = await callDependency("postgres", () =>
        submitInput(db, c.get("tenantId"), c.req.param("id"), body.content, body.idempotency_key ?? null),
      );
      if (!result) throw await missingJob(db, c.get("tenantId"), c.req.param("id"));
      // The answer to ask_user re-queued the job: wake a host like a submit does.
      if (result.resumed) wakeHosts(c.get("deps"), c.req.param("id"), (w) => c.executionCtx.waitUntil(w));
      return c.json({ input_id: result.inputId, status: result.status }, result.created ? 202 : 200);
    },
  }),
  route({
    method: "post",
    path: "/:id/approvals/:call_id",
    operationId: "decideApproval",
    tag: "jobs",
    summary: "Approve or deny the tool call a waiting job waits on",
    description:
      "Records the decision durably and re-queues the job; a host resumes it from its checkpoint (approve runs the tool, deny gives the model the note). The same decision again answers the recorded one; a different one is 409.",
    auth: "bearer",
    parameters: [jobIdParam, callIdParam],
    body: ApprovalBodySchema,
    responses: APPROVAL_RESPONSES,
    errors: APPROVAL_ERRORS,
    handler: async (c, input) => {
      const body = await input.body();
      const db = c.get("deps").db();
      const [tenantId, jobId, callId] = [c.get("tenantId"), c.req.param("id"), c.req.param("call_id")];
      const answer = await decide(c.get("deps"), tenantId, jobId, callId, body, (w) => c.executionCtx.waitUntil(w));
      if (answer === null) throw await missingJob(db, tenantId, jobId);
      return c.json(answer.body, answer.created ? 202 : 200);
    },
  }),
  route({
    method: "get",
    path: "/:id/inputs",
    operationId: "listJobInputs",
    tag: "jobs",
    summary: "A job's inputs in arrival order",
    auth: "bearer",
    parameters: [jobIdParam],
    responses: [{ status: 200, description: "The inputs.", schema: InputListSchema }],
    errors: ["not_found", "gone", ...V1_ERRORS],
    handler: async (c) => {
      const db = c.get("deps").db();
      const inputs = await callDependency("postgres", () => listInputs(db, c.get("tenantId"), c.req.param("id")));
      if (!inputs) throw await missingJob(db, c.get("tenantId"), c.req.param("id"));
      return c.json({
        inputs: inputs.map((i) => ({
          input_id: i.id,
          status: i.status,
          content: i.content,
          created_at: i.createdAt.toISOString(),
          accepted_at: i.acceptedAt?.toISOString() ?? null,
          applied_at: i.appliedAt?.toISOString() ?? null,
        })),
      });
    },
  }),
);
