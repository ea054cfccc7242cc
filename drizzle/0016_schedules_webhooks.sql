CREATE TABLE "schedules" (
	"id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" text NOT NULL,
	"cron" text NOT NULL,
	"timezone" text DEFAULT 'UTC' NOT NULL,
	"agent" text,
	"input" jsonb NOT NULL,
	"metadata" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"enabled" boolean DEFAULT true NOT NULL,
	"catch_up" text DEFAULT 'latest' NOT NULL,
	"next_run_at" timestamp with time zone,
	"last_run_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "schedules_catch_up_ck" CHECK ("schedules"."catch_up" in ('latest','none'))
);
--> statement-breakpoint
CREATE TABLE "webhook_attempts" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "webhook_attempts_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"delivery_id" uuid NOT NULL,
	"attempted_at" timestamp with time zone DEFAULT now() NOT NULL,
	"status_code" integer,
	"error" text,
	"duration_ms" integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE "webhook_deliveries" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"webhook_id" uuid NOT NULL,
	"tenant_id" text NOT NULL,
	"job_id" uuid NOT NULL,
	"event_type" text NOT NULL,
	"state" text DEFAULT 'pending' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"payload" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"finished_at" timestamp with time zone,
	CONSTRAINT "webhook_deliveries_state_ck" CHECK ("webhook_deliveries"."state" in ('pending','delivered','failed'))
);
--> statement-breakpoint
CREATE TABLE "webhooks" (
	"id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" text NOT NULL,
	"url" text NOT NULL,
	"events" jsonb NOT NULL,
	"secret" text NOT NULL,
	"enabled" boolean DEFAULT true NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "schedule_id" uuid;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "scheduled_for" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "schedules" ADD CONSTRAINT "schedules_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_attempts" ADD CONSTRAINT "webhook_attempts_delivery_id_webhook_deliveries_id_fk" FOREIGN KEY ("delivery_id") REFERENCES "public"."webhook_deliveries"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_webhook_id_webhooks_id_fk" FOREIGN KEY ("webhook_id") REFERENCES "public"."webhooks"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhooks" ADD CONSTRAINT "webhooks_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "schedules_tenant_created_idx" ON "schedules" USING btree ("tenant_id","created_at","id");--> statement-breakpoint
CREATE INDEX "schedules_due_idx" ON "schedules" USING btree ("next_run_at") WHERE "schedules"."enabled";--> statement-breakpoint
CREATE INDEX "webhook_attempts_delivery_idx" ON "webhook_attempts" USING btree ("delivery_id","attempted_at");--> statement-breakpoint
CREATE INDEX "webhook_deliveries_due_idx" ON "webhook_deliveries" USING btree ("next_attempt_at") WHERE "webhook_deliveries"."state" = 'pending';--> statement-breakpoint
CREATE INDEX "webhook_deliveries_endpoint_due_idx" ON "webhook_deliveries" USING btree ("webhook_id","next_attempt_at") WHERE "webhook_deliveries"."state" = 'pending';--> statement-breakpoint
CREATE INDEX "webhook_deliveries_webhook_idx" ON "webhook_deliveries" USING btree ("webhook_id","created_at");--> statement-breakpoint
CREATE INDEX "webhook_deliveries_job_idx" ON "webhook_deliveries" USING btree ("job_id");--> statement-breakpoint
CREATE INDEX "webhooks_tenant_idx" ON "webhooks" USING btree ("tenant_id","created_at","id");--> statement-breakpoint
CREATE UNIQUE INDEX "jobs_schedule_tick_uq" ON "jobs" USING btree ("schedule_id","scheduled_for") WHERE "jobs"."schedule_id" is not null;--> statement-breakpoint
-- The webhook outbox (hand-written, like 0003): whenever a job's state changes to one a webhook
-- can be told of (job.<state>: completed, failed, cancelled, lost, timed_out, waiting, and any
-- state added later, e.g. expired), a delivery row for each of the tenant's enabled endpoints
-- subscribed to it is inserted in the same transaction as the change, by whichever statement
-- made it (the host's finish, the reaper's lost/timed_out, a cancel, an expiry, a suspend). A
-- crash between the state change and the send loses nothing; a new terminal statement needs no
-- code for it. ear_webhook wakes the hosts' senders (they also poll).
CREATE FUNCTION ear_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO webhook_deliveries (webhook_id, tenant_id, job_id, event_type)
  SELECT w.id, NEW.tenant_id, NEW.id, 'job.' || NEW.state
  FROM webhooks w
  WHERE w.tenant_id = NEW.tenant_id AND w.enabled AND w.events ? ('job.' || NEW.state);
  IF FOUND THEN
    PERFORM pg_notify('ear_webhook', '');
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER jobs_webhook_outbox AFTER UPDATE OF state ON jobs
  FOR EACH ROW WHEN (NEW.state NOT IN ('queued', 'running') AND OLD.state IS DISTINCT FROM NEW.state)
  EXECUTE FUNCTION ear_webhook_outbox();
--> statement-breakpoint
-- A schedule created, or its cron, timezone or enabled changed (the gateway's writes; firing a
-- tick sets only next_run_at and last_run_at): every host's ticker reads the first tick at once
-- instead of at the end of its sleep.
CREATE FUNCTION ear_notify_schedule() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('ear_schedule', '');
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER schedules_notify AFTER INSERT OR UPDATE OF cron, timezone, enabled ON schedules
  FOR EACH ROW EXECUTE FUNCTION ear_notify_schedule();
