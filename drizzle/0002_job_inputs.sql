CREATE TABLE "job_inputs" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"job_id" uuid NOT NULL,
	"tenant_id" text NOT NULL,
	"seq" bigint GENERATED ALWAYS AS IDENTITY (sequence name "job_inputs_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"content" text NOT NULL,
	"idempotency_key" text,
	"status" text DEFAULT 'requested' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"accepted_at" timestamp with time zone,
	"applied_at" timestamp with time zone,
	"execution_id" uuid,
	CONSTRAINT "job_inputs_status_ck" CHECK ("job_inputs"."status" in ('requested','accepted','applied','already_finished'))
);
--> statement-breakpoint
ALTER TABLE "job_inputs" ADD CONSTRAINT "job_inputs_job_id_jobs_id_fk" FOREIGN KEY ("job_id") REFERENCES "public"."jobs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "job_inputs_job_seq_idx" ON "job_inputs" USING btree ("job_id","seq");--> statement-breakpoint
CREATE UNIQUE INDEX "job_inputs_idempotency_uq" ON "job_inputs" USING btree ("job_id","idempotency_key") WHERE "job_inputs"."idempotency_key" is not null;