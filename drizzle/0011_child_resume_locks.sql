-- Custom: the resume of a parent waiting on its children (drizzle/0010) takes the parent's row
-- lock and waits for it, instead of an advisory lock plus the parent's row with SKIP LOCKED.
-- Statements that lock a waiting parent's row without ending it (an input to it, an approval
-- naming its delegate call, the deadline sweep) made SKIP LOCKED skip the parent when the last
-- child ended at that moment, and nothing looked again: the parent waited until its wait
-- deadline and then failed. Waiting for the lock instead, the resume runs right after such a
-- statement commits.
-- The same lock serializes siblings ending at the same moment: each takes the parent's row lock
-- (FOR NO KEY UPDATE: it conflicts with itself and with FOR UPDATE, not with the FOR KEY SHARE of
-- a foreign-key check) and holds it to its commit, so under READ COMMITTED the sibling that gets
-- it second runs its check in a later snapshot, which sees the first one's child final: the last
-- one to end always sees all the others final, and re-queues the parent exactly once.
-- Locks are taken child before parent on every path (the child's terminal write holds the child,
-- then this takes the parent; the subtree cancel locks its rows deepest first), so blocking here
-- cannot deadlock with a cancel. Statements ending many children at once (a host's group commit,
-- the reaper) take the parents in the order of their rows; two of them can still deadlock, and
-- their callers retry the statement on deadlock_detected (src/db/client.ts retryOnDeadlock).
CREATE OR REPLACE FUNCTION ear_child_finished() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  resumed uuid;
BEGIN
  PERFORM 1 FROM jobs WHERE id = NEW.parent_job_id FOR NO KEY UPDATE;
  IF EXISTS (SELECT 1 FROM jobs c WHERE c.parent_job_id = NEW.parent_job_id
      AND c.parent_execution_id = NEW.parent_execution_id
      AND c.state NOT IN ('completed','failed','cancelled','lost','timed_out')) THEN
    RETURN NULL;
  END IF;
  UPDATE jobs p SET state = 'queued', waiting_for = NULL, wait_deadline_at = NULL
  WHERE p.id = NEW.parent_job_id AND p.state = 'waiting' AND p.waiting_for->>'kind' = 'children'
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
