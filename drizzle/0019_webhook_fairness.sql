ALTER TABLE "webhook_deliveries" DROP CONSTRAINT "webhook_deliveries_state_ck";--> statement-breakpoint
ALTER TABLE "webhooks" ADD COLUMN "consecutive_failures" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "webhooks" ADD COLUMN "paused_until" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "webhooks" ADD COLUMN "pause_reason" text;--> statement-breakpoint
ALTER TABLE "webhooks" ADD COLUMN "pause_ms" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "webhooks" ADD COLUMN "dropped_deliveries" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX "webhook_deliveries_tenant_pending_idx" ON "webhook_deliveries" USING btree ("tenant_id") WHERE "webhook_deliveries"."state" = 'pending';--> statement-breakpoint
CREATE INDEX "webhooks_paused_idx" ON "webhooks" USING btree ("paused_until") WHERE "webhooks"."paused_until" is not null;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_state_ck" CHECK ("webhook_deliveries"."state" in ('pending','delivered','failed','dropped'));--> statement-breakpoint
-- The outbox trigger (0016), now with a cap on what one tenant may have pending: 10,000
-- (WEBHOOK_LIMITS.maxPendingPerTenant). Past it a delivery owed is still inserted, as `dropped`
-- (finished, never sent; the retry route sends it), and counted on its endpoint
-- (webhooks.dropped_deliveries, on the API view and the hosts' /metrics): nothing is lost
-- silently, and one tenant's backlog cannot grow without bound. The count stops at the cap (the
-- partial index webhook_deliveries_tenant_pending_idx), and it is not locked: state changes of
-- one tenant committing at the same moment can overshoot it by their number.
CREATE OR REPLACE FUNCTION ear_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  cap CONSTANT int := 10000;
  room int;
BEGIN
  IF NOT EXISTS (
    SELECT 1 FROM webhooks w
    WHERE w.tenant_id = NEW.tenant_id AND w.enabled AND w.events ? ('job.' || NEW.state)
  ) THEN
    RETURN NULL;
  END IF;
  SELECT cap - count(*) INTO room FROM (
    SELECT 1 FROM webhook_deliveries
    WHERE tenant_id = NEW.tenant_id AND state = 'pending' LIMIT cap
  ) p;
  WITH owed AS (
    SELECT w.id, row_number() OVER (ORDER BY w.created_at, w.id) AS n
    FROM webhooks w
    WHERE w.tenant_id = NEW.tenant_id AND w.enabled AND w.events ? ('job.' || NEW.state)
  ), made AS (
    INSERT INTO webhook_deliveries (webhook_id, tenant_id, job_id, event_type, state, finished_at)
    SELECT o.id, NEW.tenant_id, NEW.id, 'job.' || NEW.state,
      CASE WHEN o.n <= room THEN 'pending' ELSE 'dropped' END,
      CASE WHEN o.n <= room THEN NULL ELSE now() END
    FROM owed o
    RETURNING webhook_id, state
  )
  UPDATE webhooks w SET dropped_deliveries = w.dropped_deliveries + 1
  FROM made m WHERE m.state = 'dropped' AND w.id = m.webhook_id;
  IF room > 0 THEN
    PERFORM pg_notify('ear_webhook', '');
  END IF;
  RETURN NULL;
END
$$;
