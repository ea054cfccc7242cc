-- The journal (src/db/journal-repo.ts): append-only, read whole by an execution that recovers; a
-- job's rows are few (one per step), so the primary key is its only index. A job the reaper
-- recovers goes from `running` back to `queued` with no owner: the release trigger of
-- drizzle/0001 (owner cleared while queued) already announces it on ear_ready.
CREATE TABLE "job_journal" (
	"job_id" uuid NOT NULL,
	"seq" integer NOT NULL,
	"epoch" integer NOT NULL,
	"kind" text NOT NULL,
	"payload" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "job_journal_job_id_seq_pk" PRIMARY KEY("job_id","seq"),
	CONSTRAINT "job_journal_kind_ck" CHECK ("job_journal"."kind" in ('turn','call','result','user','recovered'))
);
--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "recoveries" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "recovery_reason" text;--> statement-breakpoint
ALTER TABLE "job_journal" ADD CONSTRAINT "job_journal_job_id_jobs_id_fk" FOREIGN KEY ("job_id") REFERENCES "public"."jobs"("id") ON DELETE no action ON UPDATE no action;
