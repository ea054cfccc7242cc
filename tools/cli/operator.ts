/**
 * Operator CLI: tenants and API keys (`npm run cli -- <command>`). Reads DATABASE_URL, or the
 * running dev stack's database from .dev/stack.json.
 *
 *   tenant create <id> [--name N]    create a tenant (idempotent)
 *   tenant set <id> [--max-running N] [--weight W] [--daily-budget-usd X|none]
 *                                    change a tenant's settings (only the flags given): at most N
 *                                    jobs claimed or running at once (0 = no cap), share W of the
 *                                    fleet against other tenants, a daily budget in US dollars
 *   tenant list
 *   key create <tenant> [--name N]   create an API key; printed once, only its hash is stored
 *   key list <tenant>                list keys: id, prefix, name, created, live/revoked
 *   key revoke <tenant> <key-id>     revoke one key by its id (from `key list`)
 *   agents deploy <dir|file> [--dry-run]   agents as code (defineAgent) → the tenant's agents,
 *                                    through the API (EAR_URL + EAR_API_KEY, else the dev stack);
 *                                    a new version only for changed definitions (agents-deploy.ts)
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
  type TENANT_SETTINGS,
  type TenantSettings,
} from "../../src/db/tenants-repo";
import { deployAgents, deployTarget, loadAgents } from "./agents-deploy";

const USAGE = `usage: npm run cli -- <command>
  tenant create <id> [--name N]
  tenant set <id> [--max-running N] [--weight W] [--daily-budget-usd X|none]
                                 (0 = no cap; budget in US dollars per UTC day, none removes it)
  tenant list
  key create <tenant> [--name N]
  key list <tenant>
  key revoke <tenant> <key-id>
  agents deploy <dir|file> [--dry-run]
DATABASE_URL selects the database (default: the running dev stack's, from .dev/stack.json).
agents deploy talks to the API: EAR_URL and EAR_API_KEY (default: the running dev stack's).`;

async function databaseUrl(): Promise<string> {
  if (process.env.DATABASE_URL) return process.env.DATABASE_URL;
  try {
    const stack = JSON.parse(await readFile(".dev/stack.json", "utf8")) as { database_url?: string };
    if (stack.database_url) return stack.database_url;
  } catch {}
  throw new Error("DATABASE_URL is not set and no dev stack is running (.dev/stack.json not found)");
}

/** `tenant set`'s integer flags → the setting each changes (src/db/tenants-repo.ts TENANT_SETTINGS). */
const SETTING_FLAGS = { "max-running": "maxRunning", weight: "weight" } as const satisfies Record<
  string,
  keyof typeof TENANT_SETTINGS
>;

/** `tenant set`'s flags as a partial update (a flag not given is not touched); a bad value throws. */
function tenantSettingsFromFlags(values: Record<string, unknown>): TenantSettings {
  const settings: TenantSettings = {};
  for (const [flag, setting] of Object.entries(SETTING_FLAGS)) {
    const raw = values[flag];
    if (typeof raw !== "string") continue;
    if (!/^\d+$/.test(raw)) throw new Error(`--${flag} must be a whole number, got "${raw}"`);
    settings[setting] = Number(raw);
  }
  const budget = values["daily-budget-usd"];
  if (typeof budget === "string") {
    if (budget === "none") settings.dailyBudgetUsd = null;
    else if (/^\d+(\.\d+)?$/.test(budget)) settings.dailyBudgetUsd = Number(budget);
    else throw new Error(`--daily-budget-usd: "${budget}" is not a number of US dollars (e.g. 25 or 0.5), or none`);
  }
  if (Object.keys(settings).length === 0) {
    throw new Error("tenant set: give at least one setting (--max-running, --weight, --daily-budget-usd)");
  }
  return settings;
}

async function main(): Promise<number> {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: {
      name: { type: "string" },
      "dry-run": { type: "boolean" },
      "daily-budget-usd": { type: "string" },
      help: { type: "boolean", short: "h" },
      ...Object.fromEntries(Object.keys(SETTING_FLAGS).map((f) => [f, { type: "string" as const }])),
    },
  });
  const [noun, verb, arg, arg2] = positionals;
  if (values.help || !noun) {
    console.log(USAGE);
    return values.help ? 0 : 2;
  }
  if (noun === "agents" && verb === "deploy" && arg) {
    const target = await deployTarget(process.env, process.cwd());
    const agents = await loadAgents(arg);
    await deployAgents(target, agents, { dryRun: values["dry-run"] === true, out: (line) => console.log(line) });
    return 0;
  }
  const pool = new pg.Pool({ connectionString: await databaseUrl(), max: 1 });
  const db = drizzle(pool, { schema });
  try {
    if (noun === "tenant" && verb === "create" && arg) {
      const t = await createTenant(db, arg, values.name ?? arg);
      console.log(t.created ? `created tenant ${t.id}` : `tenant ${t.id} already exists`);
    } else if (noun === "tenant" && verb === "set" && arg) {
      const settings = tenantSettingsFromFlags(values);
      const t = await setTenantSettings(db, arg, settings);
      if (!t) {
        console.error(`no tenant "${arg}"; create it first`);
        return 1;
      }
      console.log(`tenant ${t.id}: weight=${t.weight} max_running=${t.maxRunning}, ${describeSettings(t)}`);
    } else if (noun === "tenant" && verb === "list") {
      for (const t of await listTenants(db)) {
        const budget = t.dailyBudgetUsd === null ? "" : `\tdaily budget $${t.dailyBudgetUsd}`;
        console.log(
          `${t.id}\t${t.name}\t${t.createdAt.toISOString()}\tweight=${t.weight}\tmax_running=${t.maxRunning}${budget}`,
        );
      }
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

function describeSettings(s: TenantSettings): string {
  const parts: string[] = [];
  if (s.dailyBudgetUsd !== undefined) {
    parts.push(s.dailyBudgetUsd === null ? "no daily budget" : `daily budget $${s.dailyBudgetUsd} (UTC day)`);
  }
  return parts.join(", ");
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
