CREATE TABLE "job_waits" (
	"job_id" uuid NOT NULL,
	"call_id" text NOT NULL,
	"kind" text NOT NULL,
	"tool" text NOT NULL,
	"execution_id" uuid NOT NULL,
	"requested_at" timestamp with time zone DEFAULT now() NOT NULL,
	"deadline_at" timestamp with time zone NOT NULL,
	"decision" text,
	"note" text,
	"input_id" uuid,
	"decided_by" text,
	"decided_at" timestamp with time zone,
	CONSTRAINT "job_waits_job_id_call_id_pk" PRIMARY KEY("job_id","call_id"),
	CONSTRAINT "job_waits_kind_ck" CHECK ("job_waits"."kind" in ('approval','input')),
	CONSTRAINT "job_waits_decision_ck" CHECK ("job_waits"."decision" in ('approve','deny','input'))
);
--> statement-breakpoint
ALTER TABLE "jobs" DROP CONSTRAINT "jobs_state_ck";--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "waiting_for" jsonb;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "wait_deadline_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "checkpoint" jsonb;--> statement-breakpoint
ALTER TABLE "job_waits" ADD CONSTRAINT "job_waits_job_id_jobs_id_fk" FOREIGN KEY ("job_id") REFERENCES "public"."jobs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "jobs_waiting_deadline_idx" ON "jobs" USING btree ("wait_deadline_at") WHERE "jobs"."state" = 'waiting';--> statement-breakpoint
ALTER TABLE "jobs" ADD CONSTRAINT "jobs_state_ck" CHECK ("jobs"."state" in ('queued','running','waiting','completed','failed','cancelled','lost','timed_out'));--> statement-breakpoint
-- Custom: a decision (or a deadline that denies) moves a waiting job back to queued with no
-- owner. It gets the same wake-up as a submit (ear_notify_ready, drizzle/0001), so an idle host
-- claims and resumes it at once instead of at its next ready-index poll.
CREATE TRIGGER jobs_ready_notify_resume AFTER UPDATE OF state ON jobs
  FOR EACH ROW WHEN (NEW.state = 'queued' AND NEW.owner IS NULL AND OLD.state = 'waiting')
  EXECUTE FUNCTION ear_notify_ready();
