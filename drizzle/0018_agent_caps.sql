-- What each tenant's agents take, for the per-tenant caps on agents and definition bytes
-- (docs/limits.md, "Agents and versions"): the counters the create statements read under the
-- tenant row's lock. Constant defaults (no table rewrite), then filled from the rows already
-- stored, so a tenant already past a cap gets no more agents or versions, and loses none.
ALTER TABLE "tenants" ADD COLUMN "agent_count" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "tenants" ADD COLUMN "agent_bytes" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
UPDATE "tenants" t SET
  "agent_count" = (SELECT count(*) FROM "agents" a WHERE a."tenant_id" = t."id"),
  "agent_bytes" = (SELECT coalesce(sum(octet_length(v."definition"::text)), 0) FROM "agent_versions" v WHERE v."tenant_id" = t."id");
