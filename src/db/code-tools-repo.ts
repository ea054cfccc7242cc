/**
 * The code tool catalog (table code_tools): what each host's HOST_TOOLS offer. A host replaces
 * its own entries at start (one statement: the old ones it no longer has go, the rest are
 * upserted), refreshes them while it runs and removes them at its graceful stop; the gateway
 * lists the fleet's fresh tools and checks an agent's tool names against them.
 */
import { sql } from "drizzle-orm";
import { type Db, resultRows } from "./client";

/**
 * A host with tools refreshes its rows this often, and rows not refreshed for CODE_TOOLS_STALE_S
 * are not listed (their host died without a graceful stop): 10 refreshes may be missed (a
 * Postgres outage) before a live host's tools drop out, and a dead host's go within 10 minutes.
 */
export const CODE_TOOLS_REFRESH_MS = 60_000;
export const CODE_TOOLS_STALE_S = 600;

export interface CodeToolEntry {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
  idempotent: boolean;
  requires_approval: boolean;
  timeout_ms: number;
}

/** This host's tools are exactly `tools` from now on. */
export async function publishCodeTools(db: Db, hostId: string, tools: readonly CodeToolEntry[]): Promise<void> {
  const rows = JSON.stringify(tools);
  await db.execute(sql`
    WITH gone AS (
      DELETE FROM code_tools
      WHERE host_id = ${hostId}
        AND name NOT IN (SELECT t->>'name' FROM jsonb_array_elements(${rows}::jsonb) t)
    )
    INSERT INTO code_tools (host_id, name, description, input_schema, idempotent, requires_approval, timeout_ms)
    SELECT ${hostId}, t->>'name', t->>'description', t->'input_schema', (t->>'idempotent')::boolean,
      (t->>'requires_approval')::boolean, (t->>'timeout_ms')::integer
    FROM jsonb_array_elements(${rows}::jsonb) t
    ON CONFLICT (host_id, name) DO UPDATE SET
      description = excluded.description, input_schema = excluded.input_schema,
      idempotent = excluded.idempotent, requires_approval = excluded.requires_approval,
      timeout_ms = excluded.timeout_ms, published_at = now()`);
}

/**
 * This host is alive: its rows stay fresh (one UPDATE a minute per host with tools). `freshUntil`:
 * a host about to sleep (sandbox-host/lifecycle/sleep.ts) refreshes none while asleep, so it dates
 * its rows at the end of its planned sleep, and they stay listed until CODE_TOOLS_STALE_S after
 * that (a host that died asleep: its tools drop out that much later than a busy one's).
 */
export async function refreshCodeTools(db: Db, hostId: string, freshUntil?: Date): Promise<void> {
  await db.execute(
    sql`UPDATE code_tools SET published_at = ${freshUntil ? sql`${freshUntil.toISOString()}::timestamptz` : sql`now()`} WHERE host_id = ${hostId}`,
  );
}

/** A graceful stop: this host offers nothing any more. */
export async function unpublishCodeTools(db: Db, hostId: string): Promise<void> {
  await db.execute(sql`DELETE FROM code_tools WHERE host_id = ${hostId}`);
}

/**
 * Every code tool some live host offers, by name: the most recently refreshed host's definition
 * (hosts of a rollout may differ) and how many hosts offer it.
 */
export async function listCodeTools(db: Db): Promise<Array<CodeToolEntry & { hosts: number }>> {
  const rows = resultRows<Record<string, unknown>>(
    await db.execute(sql`
      SELECT DISTINCT ON (name) name, description, input_schema, idempotent, requires_approval, timeout_ms,
        count(*) OVER (PARTITION BY name) AS hosts
      FROM code_tools
      WHERE published_at > now() - make_interval(secs => ${CODE_TOOLS_STALE_S})
      ORDER BY name, published_at DESC, host_id`),
  );
  return rows.map((r) => ({
    name: String(r.name),
    description: String(r.description),
    input_schema: (typeof r.input_schema === "string" ? JSON.parse(r.input_schema) : r.input_schema) as Record<
      string,
      unknown
    >,
    idempotent: r.idempotent === true,
    requires_approval: r.requires_approval === true,
    timeout_ms: Number(r.timeout_ms),
    hosts: Number(r.hosts),
  }));
}

/** Which of `names` some host offers. */
export async function knownCodeTools(db: Db, names: readonly string[]): Promise<Set<string>> {
  if (names.length === 0) return new Set();
  const rows = resultRows<{ name: string }>(
    await db.execute(sql`
      SELECT DISTINCT name FROM code_tools
      WHERE name IN (SELECT jsonb_array_elements_text(${JSON.stringify(names)}::jsonb))
        AND published_at > now() - make_interval(secs => ${CODE_TOOLS_STALE_S})`),
  );
  return new Set(rows.map((r) => r.name));
}
