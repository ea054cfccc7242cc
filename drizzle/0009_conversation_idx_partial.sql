-- Only jobs in a conversation need this index (conversation reads always name one). Indexing the
-- others cost an index entry in every claim, start and terminal write (none of them can be a HOT
-- update): measured 11 % of a whole lifecycle's WAL (docs/claims.md).
DROP INDEX IF EXISTS "jobs_conversation_idx";--> statement-breakpoint
CREATE INDEX "jobs_conversation_idx" ON "jobs" USING btree ("tenant_id","conversation_id","created_at") WHERE "jobs"."conversation_id" is not null;
