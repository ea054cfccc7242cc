CREATE TABLE "replays" (
	"id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" text NOT NULL,
	"filter" jsonb NOT NULL,
	"agent" text,
	"jobs_total" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "forked_from_job_id" uuid;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "forked_from_step" integer;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "replay_id" uuid;--> statement-breakpoint
ALTER TABLE "replays" ADD CONSTRAINT "replays_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "jobs_replay_idx" ON "jobs" USING btree ("replay_id") WHERE "jobs"."replay_id" is not null;