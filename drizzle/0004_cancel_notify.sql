-- Custom migration (drizzle-kit generate --custom): when a cancel is requested for a job that has
-- an owner, announce it on channel ear_cancel with the owner's host id as payload. The owner
-- LISTENs on the connection it already holds for ear_ready and runs its batched cancel check at
-- once, instead of finding the request on its next ~200 ms hint poll. Only a wake-up: the
-- durable request is the row, and the hint poll and the ~1 s durable check still converge
-- without it (Redis or the LISTEN connection down). One channel for all runs: no per-run
-- subscription.
CREATE FUNCTION ear_notify_cancel() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('ear_cancel', NEW.owner);
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER jobs_cancel_notify AFTER UPDATE OF cancel_requested_at ON jobs
  FOR EACH ROW WHEN (OLD.cancel_requested_at IS NULL AND NEW.cancel_requested_at IS NOT NULL AND NEW.owner IS NOT NULL)
  EXECUTE FUNCTION ear_notify_cancel();
