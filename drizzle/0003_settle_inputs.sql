-- Custom migration (drizzle-kit generate --custom): when a job reaches a terminal state by any
-- path (the owner's finish, the reaper's lost/timed_out, a cancel while queued), inputs it never
-- applied are settled as already_finished in the same transaction, so no input stays
-- "requested" forever. The gateway inserts inputs under FOR SHARE of the job row, which orders
-- each insert either before the terminal UPDATE (then settled here) or after it (then inserted
-- as already_finished).
CREATE FUNCTION ear_settle_inputs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE job_inputs SET status = 'already_finished'
  WHERE job_id = NEW.id AND status IN ('requested', 'accepted');
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER jobs_settle_inputs AFTER UPDATE OF state ON jobs
  FOR EACH ROW WHEN (NEW.state IN ('completed', 'failed', 'cancelled', 'lost', 'timed_out') AND OLD.state IS DISTINCT FROM NEW.state)
  EXECUTE FUNCTION ear_settle_inputs();
