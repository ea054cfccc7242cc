ALTER TABLE "executions" ADD COLUMN "token" uuid;--> statement-breakpoint
ALTER TABLE "job_inputs" ADD COLUMN "request_hash" text;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "request_hash" text;--> statement-breakpoint
CREATE INDEX "jobs_tenant_queued_idx" ON "jobs" USING btree ("tenant_id") WHERE "jobs"."state" = 'queued';