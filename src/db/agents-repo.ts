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

/**
 * The per-tenant caps on agents (docs/limits.md, "Agents and versions"); 0 turns one off. Checked
 * by the statement that inserts, against the tenant row's counters (tenants.agent_count,
 * agent_bytes) read once the statement holds that row's lock: a concurrent create of the same
 * tenant waits for it and then reads the counters as the first one left them (FOR NO KEY UPDATE
 * returns the newest version once the lock is ours). Counting the agents or summing their
 * versions instead would read the statement's snapshot, taken before the lock wait, and a burst
 * would pass the cap by as many as arrive at once. NO KEY: a job insert's foreign key check
 * (KEY SHARE) on the tenant row does not wait for it.
 */
export interface AgentCaps {
  maxAgents: number;
  maxVersions: number;
  maxBytes: number;
}

/** Which cap a create would pass. */
export type AgentCapReached = "agents" | "versions" | "bytes";

/** The lock on the tenant row and what its counters leave room for (`size`: the new definition's bytes). */
function room(tenantId: string, definitionJson: string, caps: AgentCaps): SQL {
  return sql`t AS (
        SELECT agent_count, agent_bytes FROM tenants WHERE id = ${tenantId} FOR NO KEY UPDATE
      ), size AS (
        SELECT octet_length((${definitionJson}::jsonb)::text)::bigint AS n
      ), room AS (
        SELECT (${caps.maxAgents}::int = 0 OR t.agent_count < ${caps.maxAgents}::int) AS agents_ok,
          (${caps.maxBytes}::bigint = 0 OR t.agent_bytes + size.n <= ${caps.maxBytes}::bigint) AS bytes_ok
        FROM t, size
      )`;
}

/** What a stored version adds to the tenant's counters (`added`: 1 for a new agent, 0 for a version). */
function counted(added: number): SQL {
  return sql`counted AS (
        UPDATE tenants SET agent_count = tenants.agent_count + ${added}::int, agent_bytes = tenants.agent_bytes + size.n
        FROM v, size WHERE tenants.id = v.tenant_id
        RETURNING tenants.id
      )`;
}

export type NewAgentResult = { ok: AgentVersionRow } | { exists: true } | { limit: AgentCapReached };

/**
 * Version 1 of a new agent; `exists` when the tenant already has an agent of that name (archived
 * or not), `limit` when the tenant's agents or definition bytes are at their cap.
 */
export async function createAgent(
  db: Db,
  tenantId: string,
  name: string,
  definition: AgentDefinition,
  caps: AgentCaps,
): Promise<NewAgentResult> {
  const json = JSON.stringify(definition);
  const rows = resultRows<RawVersion & { refused: AgentCapReached | null; prior_exists: boolean }>(
    await db.execute(sql`
      WITH ${room(tenantId, json, caps)}, a AS (
        INSERT INTO agents (tenant_id, name, latest_version)
        SELECT ${tenantId}, ${name}, 1 FROM room WHERE room.agents_ok AND room.bytes_ok
        ON CONFLICT (tenant_id, name) DO NOTHING
        RETURNING tenant_id, name, latest_version, archived_at
      ), v AS (
        INSERT INTO agent_versions (tenant_id, name, version, definition)
        SELECT tenant_id, name, 1, ${json}::jsonb FROM a
        RETURNING tenant_id, name, version, definition, created_at
      ), ${counted(1)}
      SELECT ${VERSION_COLUMNS},
        (SELECT CASE WHEN NOT agents_ok THEN 'agents' WHEN NOT bytes_ok THEN 'bytes' END FROM room) AS refused,
        EXISTS (SELECT 1 FROM agents WHERE tenant_id = ${tenantId} AND name = ${name}) AS prior_exists
      FROM (SELECT 1) one LEFT JOIN (v JOIN a USING (tenant_id, name)) ON true`),
  );
  const row = rows[0];
  if (row && row.version !== null) return { ok: toVersion(row) };
  // A name already taken is a conflict whatever the counters say; a refused insert is the cap's.
  if (row?.prior_exists) return { exists: true };
  if (row?.refused) return { limit: row.refused };
  // Nothing inserted, no name taken, no cap passed: the tenant row itself is missing.
  throw new Error(`createAgent: tenant "${tenantId}" does not exist`);
}

export type NewVersionResult =
  | { ok: AgentVersionRow }
  | { missing: true }
  | { archived: true }
  | { limit: AgentCapReached };

/**
 * The next version of a live agent; an archived one takes no new versions, and neither does an
 * agent at the versions cap or a tenant at its bytes cap. The agent row's own number is the
 * versions count (versions are numbered 1, 2, … and never deleted), re-read by the UPDATE once
 * it holds that row.
 */
export async function createAgentVersion(
  db: Db,
  tenantId: string,
  name: string,
  definition: AgentDefinition,
  caps: AgentCaps,
): Promise<NewVersionResult> {
  const json = JSON.stringify(definition);
  // `prior` reads the statement's snapshot (before the UPDATE): it tells a missing agent from an
  // archived one, or one at its versions cap, without a second round trip.
  const rows = resultRows<
    RawVersion & { prior_archived: boolean | null; prior_latest: number | null; bytes_ok: boolean | null }
  >(
    await db.execute(sql`
      WITH ${room(tenantId, json, caps)}, a AS (
        UPDATE agents SET latest_version = latest_version + 1
        FROM room
        WHERE tenant_id = ${tenantId} AND name = ${name} AND archived_at IS NULL AND room.bytes_ok
          AND (${caps.maxVersions}::int = 0 OR latest_version < ${caps.maxVersions}::int)
        RETURNING tenant_id, name, latest_version, archived_at
      ), v AS (
        INSERT INTO agent_versions (tenant_id, name, version, definition)
        SELECT tenant_id, name, latest_version, ${json}::jsonb FROM a
        RETURNING tenant_id, name, version, definition, created_at
      ), ${counted(0)}, prior AS (
        SELECT archived_at IS NOT NULL AS archived, latest_version FROM agents WHERE tenant_id = ${tenantId} AND name = ${name}
      )
      SELECT ${VERSION_COLUMNS}, (SELECT archived FROM prior) AS prior_archived,
        (SELECT latest_version FROM prior) AS prior_latest, (SELECT bytes_ok FROM room) AS bytes_ok
      FROM (SELECT 1) one LEFT JOIN (v JOIN a USING (tenant_id, name)) ON true`),
  );
  const row = rows[0];
  if (row && row.version !== null) return { ok: toVersion(row) };
  if (row?.prior_archived === true) return { archived: true };
  if (row?.prior_archived === false) {
    if (row.bytes_ok === false) return { limit: "bytes" };
    // Not archived in the snapshot and not updated: at the versions cap (perhaps reached by a
    // concurrent version this statement waited for).
    return { limit: "versions" };
  }
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
