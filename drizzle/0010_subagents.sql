ALTER TABLE "jobs" ADD COLUMN "parent_job_id" uuid;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "parent_execution_id" uuid;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "parent_call_id" text;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "root_job_id" uuid;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "depth" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX "jobs_parent_idx" ON "jobs" USING btree ("parent_job_id") WHERE "jobs"."parent_job_id" is not null;--> statement-breakpoint
CREATE INDEX "jobs_root_idx" ON "jobs" USING btree ("root_job_id") WHERE "jobs"."root_job_id" is not null;--> statement-breakpoint
ALTER TABLE "job_waits" DROP CONSTRAINT "job_waits_kind_ck";--> statement-breakpoint
ALTER TABLE "job_waits" DROP CONSTRAINT "job_waits_decision_ck";--> statement-breakpoint
ALTER TABLE "job_waits" ADD CONSTRAINT "job_waits_kind_ck" CHECK ("job_waits"."kind" in ('approval','input','children'));--> statement-breakpoint
ALTER TABLE "job_waits" ADD CONSTRAINT "job_waits_decision_ck" CHECK ("job_waits"."decision" in ('approve','deny','input','children'));--> statement-breakpoint
-- Custom: a parent waiting on its children (kind `children`) resumes when the last child of
-- that turn (the children its suspending execution created) reaches a final state, whichever
-- path ended it: the owner's terminal write, the reaper's `lost`, a timeout, a cancel. A trigger
-- is the one place every such path passes through, in the same transaction, so no host crash
-- between "child ended" and "parent re-queued" can strand the parent.
-- Siblings ending at the same moment serialize on an advisory lock keyed by the parent: under
-- READ COMMITTED each statement after the lock sees the sibling that committed before it, so
-- the last one to end always sees all the others final. The parent row itself is taken with
-- SKIP LOCKED: the only other writer of a waiting parent that holds its lock while it waits on
-- a child row is a subtree cancel (which ends the parent anyway), and blocking on it here would
-- deadlock with it (it holds the parent and wants this child; this holds the child).
CREATE FUNCTION ear_child_finished() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  resumed uuid;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(NEW.parent_job_id::text, 17));
  IF EXISTS (SELECT 1 FROM jobs c WHERE c.parent_job_id = NEW.parent_job_id
      AND c.parent_execution_id = NEW.parent_execution_id
      AND c.state NOT IN ('completed','failed','cancelled','lost','timed_out')) THEN
    RETURN NULL;
  END IF;
  UPDATE jobs p SET state = 'queued', waiting_for = NULL, wait_deadline_at = NULL
  WHERE p.id IN (SELECT id FROM jobs WHERE id = NEW.parent_job_id AND state = 'waiting'
      AND waiting_for->>'kind' = 'children' FOR UPDATE SKIP LOCKED)
    AND EXISTS (SELECT 1 FROM job_waits w WHERE w.job_id = p.id AND w.call_id = p.waiting_for->>'call_id'
      AND w.execution_id = NEW.parent_execution_id AND w.decision IS NULL)
  RETURNING p.id INTO resumed;
  IF resumed IS NOT NULL THEN
    UPDATE job_waits SET decision = 'children', decided_by = 'children', decided_at = now()
    WHERE job_id = resumed AND execution_id = NEW.parent_execution_id AND kind = 'children' AND decision IS NULL;
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER jobs_child_finished AFTER UPDATE OF state ON jobs
  FOR EACH ROW WHEN (NEW.parent_job_id IS NOT NULL
    AND NEW.state IN ('completed','failed','cancelled','lost','timed_out')
    AND OLD.state NOT IN ('completed','failed','cancelled','lost','timed_out'))
  EXECUTE FUNCTION ear_child_finished();
