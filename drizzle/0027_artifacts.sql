CREATE TABLE "blobs" (
	"tenant_id" text NOT NULL,
	"sha256" text NOT NULL,
	"bytes" bigint NOT NULL,
	"touched_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "blobs_tenant_id_sha256_pk" PRIMARY KEY("tenant_id","sha256")
);
--> statement-breakpoint
CREATE TABLE "job_artifacts" (
	"job_id" uuid NOT NULL,
	"tenant_id" text NOT NULL,
	"path" text NOT NULL,
	"bytes" bigint NOT NULL,
	"sha256" text NOT NULL,
	"content_type" text NOT NULL,
	"execution_id" uuid NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "job_artifacts_job_id_path_pk" PRIMARY KEY("job_id","path")
);
--> statement-breakpoint
ALTER TABLE "job_journal" DROP CONSTRAINT "job_journal_kind_ck";--> statement-breakpoint
ALTER TABLE "job_artifacts" ADD CONSTRAINT "job_artifacts_job_id_jobs_id_fk" FOREIGN KEY ("job_id") REFERENCES "public"."jobs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "job_artifacts" ADD CONSTRAINT "job_artifacts_tenant_id_sha256_blobs_tenant_id_sha256_fk" FOREIGN KEY ("tenant_id","sha256") REFERENCES "public"."blobs"("tenant_id","sha256") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "blobs_touched_idx" ON "blobs" USING btree ("touched_at");--> statement-breakpoint
CREATE INDEX "job_artifacts_blob_idx" ON "job_artifacts" USING btree ("tenant_id","sha256");--> statement-breakpoint
CREATE INDEX "job_journal_snapshot_idx" ON "job_journal" USING btree (("payload"->>'sha256')) WHERE "job_journal"."kind" = 'snapshot';--> statement-breakpoint
ALTER TABLE "job_journal" ADD CONSTRAINT "job_journal_kind_ck" CHECK ("job_journal"."kind" in ('turn','call','result','user','recovered','snapshot'));