CREATE TABLE "eval_cases" (
	"eval_id" uuid NOT NULL,
	"idx" integer NOT NULL,
	"tenant_id" text NOT NULL,
	"input" jsonb NOT NULL,
	"expect" text,
	"source_job_id" uuid,
	"job_id" uuid NOT NULL,
	"judge_jobs" jsonb,
	"scores" jsonb,
	"score" double precision,
	"pass" boolean,
	"scored_at" timestamp with time zone,
	CONSTRAINT "eval_cases_eval_id_idx_pk" PRIMARY KEY("eval_id","idx")
);
--> statement-breakpoint
CREATE TABLE "evals" (
	"id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" text NOT NULL,
	"agent" text NOT NULL,
	"agent_name" text NOT NULL,
	"agent_version" integer NOT NULL,
	"scorers" jsonb NOT NULL,
	"replay_of" jsonb,
	"cases_total" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "eval_cases" ADD CONSTRAINT "eval_cases_eval_id_evals_id_fk" FOREIGN KEY ("eval_id") REFERENCES "public"."evals"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "evals" ADD CONSTRAINT "evals_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "eval_cases_pending_idx" ON "eval_cases" USING btree ("job_id") WHERE "eval_cases"."scored_at" is null;--> statement-breakpoint
CREATE INDEX "evals_tenant_created_idx" ON "evals" USING btree ("tenant_id","created_at" DESC NULLS LAST,"id" DESC NULLS LAST);