-- The client's W3C traceparent, kept as a link rather than the run's parent unless the operator
-- trusts clients' trace context (OTEL_TRUST_CLIENT_SAMPLING): a client must not decide whether
-- the operator's traces record its runs, nor choose their trace id. Nullable: no table rewrite.
ALTER TABLE "jobs" ADD COLUMN "client_traceparent" text;--> statement-breakpoint
-- What each tenant's agents take, for the per-tenant caps on agents and definition bytes
-- (docs/limits.md, "Agents and versions"): the counters the create statements read under the
-- tenant row's lock. Constant defaults (no table rewrite), then filled from the rows already
-- stored, so a tenant already past a cap gets no more agents or versions, and loses none.
ALTER TABLE "tenants" ADD COLUMN "agent_count" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "tenants" ADD COLUMN "agent_bytes" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
UPDATE "tenants" t SET
  "agent_count" = (SELECT count(*) FROM "agents" a WHERE a."tenant_id" = t."id"),
  "agent_bytes" = (SELECT coalesce(sum(octet_length(v."definition"::text)), 0) FROM "agent_versions" v WHERE v."tenant_id" = t."id");
