/**
 * The control path of a job (ARCHITECTURE "Cancellation and in-flight input"): durable first,
 * fast hint second. Cancel commits in Postgres (a queued, unclaimed job is cancelled right there),
 * then sets a Redis hint key with a TTL that the owning host reads in its ~200 ms batched check;
 * without Redis the host's ~1 s durable check still converges. Input is stored in Postgres and
 * applied by the owner at its next model turn; its status is readable.
 */
import { Hono } from "hono";
import { JobInputBodySchema } from "../../src/contracts";
import { type CancelStatus, listInputs, requestCancel, submitInput } from "../../src/db/control-repo";
import { redisKeys } from "../../src/quota/keys";
import { callDependency, type Deps, withTimeout } from "../deps";
import { readJsonBody } from "../request/body";
import type { GatewayEnv } from "../types";
import { notFoundJob } from "./jobs";

const keys = redisKeys();
const HINT_TTL_S = 600;
const HINT_TIMEOUT_MS = 500;

/** The one cancel path: POST /cancel, the WebSocket `cancel` frame and the chat `interrupt` policy. */
export async function cancelJob(
  deps: Deps,
  tenantId: string,
  jobId: string,
): Promise<Exclude<CancelStatus, "not_found">> {
  const db = deps.db();
  const status = await callDependency("postgres", () => requestCancel(db, tenantId, jobId));
  if (status === "not_found") throw notFoundJob();
  if (status === "requested") {
    try {
      await withTimeout(deps.redis().set(keys.cancelHint(jobId), "1", { ex: HINT_TTL_S }), HINT_TIMEOUT_MS, "redis");
    } catch (err) {
      console.warn(
        JSON.stringify({ msg: "cancel hint not set; hosts converge on the durable flag", jobId, error: String(err) }),
      );
    }
  }
  return status;
}

export const jobControlRoutes = new Hono<GatewayEnv>()
  .post("/:id/cancel", async (c) => {
    const status = await cancelJob(c.get("deps"), c.get("tenantId"), c.req.param("id"));
    return c.json({ status }, 202);
  })
  .post("/:id/input", async (c) => {
    const body = await readJsonBody(c.req.raw, JobInputBodySchema, c.get("config").maxBodyBytes);
    const db = c.get("deps").db();
    const result = await callDependency("postgres", () =>
      submitInput(db, c.get("tenantId"), c.req.param("id"), body.content, body.idempotency_key ?? null),
    );
    if (!result) throw notFoundJob();
    return c.json({ input_id: result.inputId, status: result.status }, result.created ? 202 : 200);
  })
  .get("/:id/inputs", async (c) => {
    const db = c.get("deps").db();
    const inputs = await callDependency("postgres", () => listInputs(db, c.get("tenantId"), c.req.param("id")));
    if (!inputs) throw notFoundJob();
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
