ALTER TABLE "job_waits" DROP CONSTRAINT "job_waits_kind_ck";--> statement-breakpoint
ALTER TABLE "job_waits" ADD COLUMN "add_usd" numeric;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "reserved_usd" numeric DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "limits" jsonb;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "budget_added_usd" numeric DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "job_waits" ADD CONSTRAINT "job_waits_kind_ck" CHECK ("job_waits"."kind" in ('approval','input','children','budget'));