-- Admission (issue 28, docs/claims.md "Admission"): priority, run_at (delay_s), ttl_s with the new
-- final state `expired`, concurrency keys, and the tenant's weight and max_running, all applied by
-- the claim statement. Constant defaults: catalog changes only, no table rewrite.
ALTER TABLE "jobs" DROP CONSTRAINT "jobs_state_ck";--> statement-breakpoint
DROP INDEX "jobs_finished_idx";--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "priority" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "run_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "expires_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "concurrency_key" text;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "tenant_slot" integer;--> statement-breakpoint
ALTER TABLE "tenants" ADD COLUMN "weight" integer DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE "tenants" ADD COLUMN "max_running" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX "jobs_admission_idx" ON "jobs" USING btree ("tenant_id","priority" DESC NULLS LAST,"created_at") WHERE "jobs"."state" = 'queued' and "jobs"."owner" is null;--> statement-breakpoint
CREATE INDEX "jobs_held_idx" ON "jobs" USING btree ("tenant_id") WHERE owner IS NOT NULL AND state IN ('queued', 'running');--> statement-breakpoint
CREATE UNIQUE INDEX "jobs_held_key_uq" ON "jobs" USING btree ("tenant_id","concurrency_key") WHERE "jobs"."concurrency_key" is not null and owner IS NOT NULL AND state IN ('queued', 'running');--> statement-breakpoint
CREATE UNIQUE INDEX "jobs_held_slot_uq" ON "jobs" USING btree ("tenant_id","tenant_slot") WHERE "jobs"."tenant_slot" is not null and owner IS NOT NULL AND state IN ('queued', 'running');--> statement-breakpoint
CREATE INDEX "jobs_expiry_idx" ON "jobs" USING btree ("expires_at") WHERE "jobs"."state" = 'queued' and "jobs"."expires_at" is not null;--> statement-breakpoint
CREATE INDEX "jobs_finished_idx" ON "jobs" USING btree ("finished_at") WHERE "jobs"."state" in ('completed','failed','cancelled','lost','timed_out','expired');--> statement-breakpoint
ALTER TABLE "jobs" ADD CONSTRAINT "jobs_priority_ck" CHECK ("jobs"."priority" between -100 and 100);--> statement-breakpoint
ALTER TABLE "jobs" ADD CONSTRAINT "jobs_state_ck" CHECK ("jobs"."state" in ('queued','running','waiting','completed','failed','cancelled','lost','timed_out','expired'));--> statement-breakpoint
ALTER TABLE "tenants" ADD CONSTRAINT "tenants_weight_ck" CHECK ("tenants"."weight" >= 1);--> statement-breakpoint
ALTER TABLE "tenants" ADD CONSTRAINT "tenants_max_running_ck" CHECK ("tenants"."max_running" >= 0);;--> statement-breakpoint
-- Custom: the settle-inputs trigger (0003) fires on every final state, `expired` included.
DROP TRIGGER jobs_settle_inputs ON jobs;--> statement-breakpoint
CREATE TRIGGER jobs_settle_inputs AFTER UPDATE OF state ON jobs
  FOR EACH ROW WHEN (NEW.state IN ('completed', 'failed', 'cancelled', 'lost', 'timed_out', 'expired') AND OLD.state IS DISTINCT FROM NEW.state)
  EXECUTE FUNCTION ear_settle_inputs();
