/** Liveness and readiness answers (workers/routes/health.ts). */
import { z } from "zod";
import { ErrorBodySchema } from "./errors";

export const HealthSchema = z.object({ ok: z.literal(true) });

const check = z.enum(["ok", "unavailable"]);
/** 200 with both checks "ok"; 503 names the failed ones, or carries only `ok` and `error` when misconfigured. */
export const ReadinessSchema = z.object({
  ok: z.boolean(),
  postgres: check.optional(),
  redis: check.optional(),
  error: ErrorBodySchema.shape.error.optional(),
});
export type Readiness = z.infer<typeof ReadinessSchema>;
