-- Cost per model call at the operator's registry prices (null: the model has no price), the
-- job's running sum of it, and a daily budget per tenant checked against a per-day running sum
-- (one primary-key row per tenant and UTC day: a submit's check must not sum a day of calls).
-- And the W3C traceparent a job was submitted with (its run's spans join the client's trace).
-- All nullable or constant-default: catalog changes only, no table rewrite.
ALTER TABLE "model_usage" ADD COLUMN "cost_usd" numeric;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "cost_usd" numeric;--> statement-breakpoint
ALTER TABLE "tenants" ADD COLUMN "daily_budget_usd" numeric;--> statement-breakpoint
CREATE TABLE "tenant_daily_spend" (
	"tenant_id" text NOT NULL,
	"day" date NOT NULL,
	"cost_usd" numeric DEFAULT 0 NOT NULL,
	CONSTRAINT "tenant_daily_spend_tenant_id_day_pk" PRIMARY KEY("tenant_id","day")
);
--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "traceparent" text;
