/**
 * Agents and their immutable versions (src/contracts/agent.ts). The gateway's driver is Neon's
 * SQL-over-HTTP, which has no interactive transactions, so each write that touches both tables
 * is one statement: the data-modifying CTEs of a statement commit together, and the foreign key
 * from agent_versions to agents is checked at the statement's end, when both rows exist.
 * A new version takes the agent row's lock (the UPDATE of latest_version), so two concurrent
 * edits get consecutive numbers, never the same one.
 */
import { type SQL, sql } from "drizzle-orm";
import { type AgentDefinition, AgentDefinitionSchema, type AgentView } from "../contracts/agent";
import { type Db, resultRows } from "./client";

/** A stored version as the gateway reads it: the view plus what a submit needs. */
export interface AgentVersionRow {
  view: AgentView;
  definition: AgentDefinition;
  archived: boolean;
}

interface RawVersion {
  name: string;
  version: number | string;
  latest_version: number | string;
  definition: AgentDefinition | string;
  created_at: string;
  archived_at: string | null;
}

/** ISO 8601 in UTC with milliseconds, the form every other timestamp of the API has. */
const iso = (column: SQL) => sql`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/** The columns of a version joined to its agent (aliases `a` and `v`), as RawVersion. */
const VERSION_COLUMNS = sql`v.name, v.version, a.latest_version, v.definition,
  ${iso(sql`v.created_at`)} AS created_at, ${iso(sql`a.archived_at`)} AS archived_at`;

/** The definition's fields in the contract's order (jsonb keeps its own, by key length). */
const DEFINITION_FIELDS = Object.keys(AgentDefinitionSchema.shape) as (keyof AgentDefinition)[];

function toVersion(raw: RawVersion): AgentVersionRow {
  // node-postgres parses jsonb; keep a string parse for a driver configured not to.
  const definition = (
    typeof raw.definition === "string" ? JSON.parse(raw.definition) : raw.definition
  ) as AgentDefinition;
  return {
    view: {
      name: raw.name,
      version: Number(raw.version),
      latest_version: Number(raw.latest_version),
      ...(Object.fromEntries(DEFINITION_FIELDS.map((k) => [k, definition[k]])) as AgentDefinition),
      created_at: raw.created_at,
      archived_at: raw.archived_at,
    },
    definition,
    archived: raw.archived_at !== null,
  };
}

/** Version 1 of a new agent, or null when the tenant already has an agent of that name (archived or not). */
export async function createAgent(
  db: Db,
  tenantId: string,
  name: string,
  definition: AgentDefinition,
): Promise<AgentVersionRow | null> {
  const rows = resultRows<RawVersion>(
    await db.execute(sql`
      WITH a AS (
        INSERT INTO agents (tenant_id, name, latest_version) VALUES (${tenantId}, ${name}, 1)
        ON CONFLICT (tenant_id, name) DO NOTHING
        RETURNING tenant_id, name, latest_version, archived_at
      ), v AS (
        INSERT INTO agent_versions (tenant_id, name, version, definition)
        SELECT tenant_id, name, 1, ${JSON.stringify(definition)}::jsonb FROM a
        RETURNING tenant_id, name, version, definition, created_at
      )
      SELECT ${VERSION_COLUMNS} FROM v JOIN a USING (tenant_id, name)`),
  );
  return rows[0] ? toVersion(rows[0]) : null;
}

export type NewVersionResult = { ok: AgentVersionRow } | { missing: true } | { archived: true };

/** The next version of a live agent; an archived one takes no new versions. */
export async function createAgentVersion(
  db: Db,
  tenantId: string,
  name: string,
  definition: AgentDefinition,
): Promise<NewVersionResult> {
  // `prior` reads the statement's snapshot (before the UPDATE): it tells a missing agent from an
  // archived one without a second round trip.
  const rows = resultRows<RawVersion & { prior_archived: boolean | null }>(
    await db.execute(sql`
      WITH a AS (
        UPDATE agents SET latest_version = latest_version + 1
        WHERE tenant_id = ${tenantId} AND name = ${name} AND archived_at IS NULL
        RETURNING tenant_id, name, latest_version, archived_at
      ), v AS (
        INSERT INTO agent_versions (tenant_id, name, version, definition)
        SELECT tenant_id, name, latest_version, ${JSON.stringify(definition)}::jsonb FROM a
        RETURNING tenant_id, name, version, definition, created_at
      ), prior AS (
        SELECT archived_at IS NOT NULL AS archived FROM agents WHERE tenant_id = ${tenantId} AND name = ${name}
      )
      SELECT ${VERSION_COLUMNS}, (SELECT archived FROM prior) AS prior_archived
      FROM (SELECT 1) one LEFT JOIN (v JOIN a USING (tenant_id, name)) ON true`),
  );
  const row = rows[0];
  if (row && row.version !== null) return { ok: toVersion(row) };
  if (row?.prior_archived === true) return { archived: true };
  return { missing: true };
}

/** One version (`version` null: the latest), or null when the tenant has no such agent or version. */
export async function getAgentVersion(
  db: Db,
  tenantId: string,
  name: string,
  version: number | null,
): Promise<AgentVersionRow | null> {
  const rows = resultRows<RawVersion>(
    await db.execute(sql`
      SELECT ${VERSION_COLUMNS}
      FROM agents a JOIN agent_versions v ON v.tenant_id = a.tenant_id AND v.name = a.name
      WHERE a.tenant_id = ${tenantId} AND a.name = ${name}
        AND v.version = coalesce(${version}::int, a.latest_version)`),
  );
  return rows[0] ? toVersion(rows[0]) : null;
}

/**
 * The tenant's live agents at their latest versions, by name, keyset-paginated on the name
 * (`after`: the last name of the previous page). Archived agents are left out.
 */
export async function listAgents(
  db: Db,
  tenantId: string,
  opts: { limit: number; after?: string },
): Promise<{ agents: AgentView[]; last: string | null; more: boolean }> {
  const rows = resultRows<RawVersion>(
    await db.execute(sql`
      SELECT ${VERSION_COLUMNS}
      FROM agents a JOIN agent_versions v
        ON v.tenant_id = a.tenant_id AND v.name = a.name AND v.version = a.latest_version
      WHERE a.tenant_id = ${tenantId} AND a.archived_at IS NULL
        ${opts.after === undefined ? sql`` : sql`AND a.name > ${opts.after}`}
      ORDER BY a.name
      LIMIT ${opts.limit + 1}`),
  );
  const page = rows.slice(0, opts.limit).map((r) => toVersion(r).view);
  return { agents: page, last: page[page.length - 1]?.name ?? null, more: rows.length > opts.limit };
}

/**
 * An agent's versions, newest first, keyset-paginated on the number (`before`: the last version
 * of the previous page); null when the tenant has no such agent.
 */
export async function listAgentVersions(
  db: Db,
  tenantId: string,
  name: string,
  opts: { limit: number; before?: number },
): Promise<{ versions: AgentView[]; more: boolean } | null> {
  const rows = resultRows<RawVersion>(
    await db.execute(sql`
      SELECT ${VERSION_COLUMNS}
      FROM agents a JOIN agent_versions v ON v.tenant_id = a.tenant_id AND v.name = a.name
      WHERE a.tenant_id = ${tenantId} AND a.name = ${name}
        ${opts.before === undefined ? sql`` : sql`AND v.version < ${opts.before}::int`}
      ORDER BY v.version DESC
      LIMIT ${opts.limit + 1}`),
  );
  if (rows.length === 0) {
    // An empty page past the last version is still an agent; no agent at all is a 404.
    if (opts.before === undefined) return null;
    return (await getAgentVersion(db, tenantId, name, null)) ? { versions: [], more: false } : null;
  }
  return { versions: rows.slice(0, opts.limit).map((r) => toVersion(r).view), more: rows.length > opts.limit };
}

/** Archive (idempotent: the first archive's time stays); the latest version as it now reads, or null. */
export async function archiveAgent(db: Db, tenantId: string, name: string): Promise<AgentVersionRow | null> {
  const rows = resultRows<RawVersion>(
    await db.execute(sql`
      WITH a AS (
        UPDATE agents SET archived_at = coalesce(archived_at, now())
        WHERE tenant_id = ${tenantId} AND name = ${name}
        RETURNING tenant_id, name, latest_version, archived_at
      )
      SELECT ${VERSION_COLUMNS}
      FROM a JOIN agent_versions v
        ON v.tenant_id = a.tenant_id AND v.name = a.name AND v.version = a.latest_version`),
  );
  return rows[0] ? toVersion(rows[0]) : null;
}
