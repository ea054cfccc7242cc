/**
 * Operator CLI: tenants and API keys (`npm run cli -- <command>`). Reads DATABASE_URL, or the
 * running dev stack's database from .dev/stack.json.
 *
 *   tenant create <id> [--name N]    create a tenant (idempotent)
 *   tenant list
 *   tenant set <id> [--max-running N] [--weight W]
 *                                    admission settings: at most N jobs claimed or running at once
 *                                    (0 = no cap), share W of the fleet against other tenants
 *   key create <tenant> [--name N]   create an API key; printed once, only its hash is stored
 *   key list <tenant>                list keys: id, prefix, name, created, live/revoked
 *   key revoke <tenant> <key-id>     revoke one key by its id (from `key list`)
 */
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import * as schema from "../../src/db/schema";
import {
  createApiKey,
  createTenant,
  listApiKeys,
  listTenants,
  revokeApiKey,
  setTenantSettings,
  type TenantSettings,
} from "../../src/db/tenants-repo";

const USAGE = `usage: npm run cli -- <command>
  tenant create <id> [--name N]
  tenant list
  tenant set <id> [--max-running N] [--weight W]
  key create <tenant> [--name N]
  key list <tenant>
  key revoke <tenant> <key-id>
DATABASE_URL selects the database (default: the running dev stack's, from .dev/stack.json).`;

async function databaseUrl(): Promise<string> {
  if (process.env.DATABASE_URL) return process.env.DATABASE_URL;
  try {
    const stack = JSON.parse(await readFile(".dev/stack.json", "utf8")) as { database_url?: string };
    if (stack.database_url) return stack.database_url;
  } catch {}
  throw new Error("DATABASE_URL is not set and no dev stack is running (.dev/stack.json not found)");
}

/** `tenant set` flags → the setting each changes (src/db/tenants-repo.ts TENANT_SETTINGS). */
const SETTING_FLAGS = { "max-running": "maxRunning", weight: "weight" } as const satisfies Record<
  string,
  keyof TenantSettings
>;

function parseSettings(values: Record<string, unknown>): TenantSettings {
  const settings: TenantSettings = {};
  for (const [flag, setting] of Object.entries(SETTING_FLAGS)) {
    const raw = values[flag];
    if (typeof raw !== "string") continue;
    if (!/^\d+$/.test(raw)) throw new Error(`--${flag} must be a whole number, got "${raw}"`);
    settings[setting] = Number(raw);
  }
  return settings;
}

async function main(): Promise<number> {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: {
      name: { type: "string" },
      help: { type: "boolean", short: "h" },
      ...Object.fromEntries(Object.keys(SETTING_FLAGS).map((f) => [f, { type: "string" as const }])),
    },
  });
  const [noun, verb, arg, arg2] = positionals;
  if (values.help || !noun) {
    console.log(USAGE);
    return values.help ? 0 : 2;
  }
  const pool = new pg.Pool({ connectionString: await databaseUrl(), max: 1 });
  const db = drizzle(pool, { schema });
  try {
    if (noun === "tenant" && verb === "create" && arg) {
      const t = await createTenant(db, arg, values.name ?? arg);
      console.log(t.created ? `created tenant ${t.id}` : `tenant ${t.id} already exists`);
    } else if (noun === "tenant" && verb === "list") {
      for (const t of await listTenants(db)) {
        console.log(
          `${t.id}\t${t.name}\t${t.createdAt.toISOString()}\tweight=${t.weight}\tmax_running=${t.maxRunning}`,
        );
      }
    } else if (noun === "tenant" && verb === "set" && arg) {
      const t = await setTenantSettings(db, arg, parseSettings(values));
      if (!t) {
        console.error(`no tenant "${arg}"`);
        return 1;
      }
      console.log(`tenant ${t.id}: weight=${t.weight} max_running=${t.maxRunning}`);
    } else if (noun === "key" && verb === "create" && arg) {
      const k = await createApiKey(db, arg, values.name ?? null);
      console.log(k.key);
      console.error(`(key ${k.id}, prefix ${k.prefix}, for tenant ${arg}; shown once, store it now)`);
    } else if (noun === "key" && verb === "list" && arg) {
      for (const k of await listApiKeys(db, arg)) {
        console.log(
          `${k.id}\t${k.prefix}\t${k.name ?? ""}\t${k.createdAt.toISOString()}\t${k.revokedAt ? "revoked" : "live"}`,
        );
      }
    } else if (noun === "key" && verb === "revoke" && arg && arg2) {
      const revoked = await revokeApiKey(db, arg, arg2);
      console.log(revoked ? `revoked key ${arg2} of tenant ${arg}` : `tenant ${arg} has no live key with id ${arg2}`);
      if (!revoked) return 1;
    } else {
      console.error(USAGE);
      return 2;
    }
    return 0;
  } finally {
    await pool.end();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
