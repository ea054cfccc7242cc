-- The code tools each host offers (HOST_TOOLS), published at its start, removed at its graceful
-- stop; GET /v1/tools lists them and an agent may name only a tool some host has (issue 29).
CREATE TABLE "code_tools" (
	"host_id" text NOT NULL,
	"name" text NOT NULL,
	"description" text NOT NULL,
	"input_schema" jsonb NOT NULL,
	"idempotent" boolean NOT NULL,
	"requires_approval" boolean NOT NULL,
	"timeout_ms" integer NOT NULL,
	"published_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "code_tools_host_id_name_pk" PRIMARY KEY("host_id","name")
);
--> statement-breakpoint
CREATE INDEX "code_tools_name_idx" ON "code_tools" USING btree ("name");