-- A schedule whose tick fails to fire (a timezone the firer refuses, a failed read) is tried again
-- after a growing delay (retry_at, failures) and says why (last_error) instead of being read again
-- at every pass; the due index covers the delay, so such a row leaves the due read until then
-- (src/db/schedules-repo.ts). Nullable or constant-default columns: catalog changes only.
DROP INDEX "schedules_due_idx";--> statement-breakpoint
ALTER TABLE "schedules" ADD COLUMN "retry_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "schedules" ADD COLUMN "failures" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "schedules" ADD COLUMN "last_error" text;--> statement-breakpoint
CREATE INDEX "schedules_due_idx" ON "schedules" USING btree (greatest("next_run_at", "retry_at")) WHERE "schedules"."enabled";