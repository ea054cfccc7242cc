/**
 * The control path of a job: durable first,
 * fast hint second. Cancel commits in Postgres (a queued, unclaimed job is cancelled right there),
 * then sets a Redis hint key with a TTL that the owning host reads in its ~200 ms batched check;
 * without Redis the host's ~1 s durable check still converges. Input is stored in Postgres and
 * applied by the owner at its next model turn; its status is readable. A waiting job is resumed
 * by a decision on the call it waits on (approvals) or, for ask_user, by input.
 */
import { Hono } from "hono";
import { JobInputBodySchema } from "../../src/contracts/job";
import { ApprovalBodySchema } from "../../src/contracts/wait";
import { listInputs, submitInput } from "../../src/db/control-repo";
import { cancelJob } from "../commands/cancel";
import { decide, wakeHosts } from "../commands/decide";
import { callDependency } from "../deps";
import { readJsonBody } from "../request/body";
import type { GatewayEnv } from "../types";
import { missingJob } from "./jobs";

export const jobControlRoutes = new Hono<GatewayEnv>()
  .post("/:id/cancel", async (c) => {
    const status = await cancelJob(c.get("deps"), c.get("tenantId"), c.req.param("id"), (hint) =>
      c.executionCtx.waitUntil(hint),
    );
    if (status === "not_found") throw await missingJob(c.get("deps").db(), c.get("tenantId"), c.req.param("id"));
    return c.json({ status }, 202);
  })
  .post("/:id/input", async (c) => {
    const body = await readJsonBody(c.req.raw, JobInputBodySchema, c.get("config").maxBodyBytes);
    const db = c.get("deps").db();
    const result = await callDependency("postgres", () =>
      submitInput(db, c.get("tenantId"), c.req.param("id"), body.content, body.idempotency_key ?? null),
    );
    if (!result) throw await missingJob(db, c.get("tenantId"), c.req.param("id"));
    // The answer to ask_user re-queued the job: wake a host like a submit does.
    if (result.resumed) wakeHosts(c.get("deps"), c.req.param("id"), (w) => c.executionCtx.waitUntil(w));
    return c.json({ input_id: result.inputId, status: result.status }, result.created ? 202 : 200);
  })
  .post("/:id/approvals/:call_id", async (c) => {
    const body = await readJsonBody(c.req.raw, ApprovalBodySchema, c.get("config").maxBodyBytes);
    const db = c.get("deps").db();
    const [tenantId, jobId, callId] = [c.get("tenantId"), c.req.param("id"), c.req.param("call_id")];
    const answer = await decide(c.get("deps"), tenantId, jobId, callId, body, (w) => c.executionCtx.waitUntil(w));
    if (answer === null) throw await missingJob(db, tenantId, jobId);
    return c.json(answer.body, answer.created ? 202 : 200);
  })
  .get("/:id/inputs", async (c) => {
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
  });
