-- Custom migration (drizzle-kit generate --custom): a trigger drizzle's schema cannot express.
-- Postgres announces every job that becomes claimable (inserted, or released by the reaper) on
-- channel ear_ready with the job id as payload. Hosts LISTEN on a direct connection and try the
-- fenced claim at once, so an idle host starts a job in milliseconds instead of waiting for its
-- next ready-index poll (measured before this: enqueue→started median ~100-200 ms). The
-- notification is only a wake-up: the claim is still the conditional UPDATE.
CREATE FUNCTION ear_notify_ready() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('ear_ready', NEW.id::text);
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER jobs_ready_notify_insert AFTER INSERT ON jobs
  FOR EACH ROW WHEN (NEW.state = 'queued' AND NEW.owner IS NULL)
  EXECUTE FUNCTION ear_notify_ready();
--> statement-breakpoint
CREATE TRIGGER jobs_ready_notify_release AFTER UPDATE OF owner ON jobs
  FOR EACH ROW WHEN (NEW.state = 'queued' AND NEW.owner IS NULL AND OLD.owner IS NOT NULL)
  EXECUTE FUNCTION ear_notify_ready();
