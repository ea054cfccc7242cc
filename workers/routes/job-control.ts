/**
 * The control path of a job: durable first,
 * fast hint second. Cancel commits in Postgres (a queued, unclaimed job is cancelled right there),
 * then sets a Redis hint key with a TTL that the owning host reads in its ~200 ms batched check;
 * without Redis the host's ~1 s durable check still converges. Input is stored in Postgres and
 * applied by the owner at its next model turn; its status is readable.
 */
import { Hono } from "hono";
import { JobInputBodySchema } from "../../src/contracts/job";
import { listInputs, submitInput } from "../../src/db/control-repo";
import { cancelJob } from "../commands/cancel";
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
    return c.json({ input_id: result.inputId, status: result.status }, result.created ? 202 : 200);
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
