ALTER TABLE "jobs" ADD COLUMN "forked_from_job_id" uuid;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "forked_from_step" integer;