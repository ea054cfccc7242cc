/** Tenants and their API keys. A key is returned once, at creation; only its hash is stored. */
import { and, eq, isNull } from "drizzle-orm";
import { ADMISSION_LIMITS } from "../contracts/admission";
import { generateApiKey, hashApiKey } from "../domain/api-keys";
import { TENANT_ID_RE } from "../domain/tenant-id";
import { isUuid } from "../domain/uuid";
import type { Db } from "./client";
import { apiKeys, tenants } from "./schema";

export { TENANT_ID_RE };

export async function createTenant(db: Db, id: string, name = id): Promise<{ id: string; created: boolean }> {
  if (!TENANT_ID_RE.test(id)) {
    throw new Error(`tenant id "${id}" must be 1-63 chars of a-z, 0-9, _ or -, starting with a letter or digit`);
  }
  const rows = await db.insert(tenants).values({ id, name }).onConflictDoNothing().returning({ id: tenants.id });
  return { id, created: rows.length === 1 };
}

/**
 * The settings `tenant set` can change, each a column of `tenants`. The integer ones with their
 * range (another is one more entry here, and its flag in tools/cli/operator.ts); `dailyBudgetUsd`:
 * US dollars per UTC day (docs/quota.md, "Daily budgets"), null removes the budget.
 */
export const TENANT_SETTINGS = {
  /** Share of the fleet's slots relative to the other tenants with runnable work (the claim's weighted round-robin). */
  weight: { min: ADMISSION_LIMITS.minWeight, max: ADMISSION_LIMITS.maxWeight },
  /** At most this many of the tenant's jobs claimed or running at once across the fleet (0 = no cap). */
  maxRunning: { min: 0, max: ADMISSION_LIMITS.maxMaxRunning },
} as const;
export type TenantSettings = { -readonly [K in keyof typeof TENANT_SETTINGS]?: number } & {
  dailyBudgetUsd?: number | null;
};

/**
 * Changes the given settings of a tenant (a partial update: what is not named is kept); returns
 * the tenant's row, or null when there is no such tenant. A value out of its range throws.
 */
export async function setTenantSettings(db: Db, id: string, settings: TenantSettings) {
  const set: Partial<typeof tenants.$inferInsert> = {};
  for (const [name, range] of Object.entries(TENANT_SETTINGS)) {
    const value = settings[name as keyof typeof TENANT_SETTINGS];
    if (value === undefined) continue;
    if (!Number.isInteger(value) || value < range.min || value > range.max) {
      throw new Error(`${name} must be an integer from ${range.min} to ${range.max}`);
    }
    set[name as keyof typeof TENANT_SETTINGS] = value;
  }
  if (settings.dailyBudgetUsd !== undefined) {
    const b = settings.dailyBudgetUsd;
    if (b !== null && !(Number.isFinite(b) && b >= 0)) throw new Error("dailyBudgetUsd must be a number ≥ 0, or null");
    set.dailyBudgetUsd = b;
  }
  if (Object.keys(set).length === 0) throw new Error("nothing to set");
  const rows = await db.update(tenants).set(set).where(eq(tenants.id, id)).returning();
  return rows[0] ?? null;
}

export async function listTenants(db: Db) {
  return db.select().from(tenants).orderBy(tenants.createdAt);
}

export async function createApiKey(
  db: Db,
  tenantId: string,
  name: string | null = null,
): Promise<{ key: string; prefix: string; id: string }> {
  const exists = await db.select({ id: tenants.id }).from(tenants).where(eq(tenants.id, tenantId)).limit(1);
  if (exists.length === 0) throw new Error(`no tenant "${tenantId}"; create it first`);
  const { key, prefix } = generateApiKey();
  const [row] = await db
    .insert(apiKeys)
    .values({ tenantId, prefix, keyHash: await hashApiKey(key), name })
    .returning({ id: apiKeys.id });
  return { key, prefix, id: (row as { id: string }).id };
}

export async function listApiKeys(db: Db, tenantId: string) {
  return db
    .select({
      id: apiKeys.id,
      prefix: apiKeys.prefix,
      name: apiKeys.name,
      createdAt: apiKeys.createdAt,
      revokedAt: apiKeys.revokedAt,
    })
    .from(apiKeys)
    .where(eq(apiKeys.tenantId, tenantId))
    .orderBy(apiKeys.createdAt);
}

/**
 * Revokes one live key of `tenantId`, named by its unique id (`key list` shows it). Never by
 * prefix: a prefix is a few random characters that another tenant's key may share. Returns
 * whether a key was revoked.
 */
export async function revokeApiKey(db: Db, tenantId: string, keyId: string): Promise<boolean> {
  if (!isUuid(keyId)) return false;
  const rows = await db
    .update(apiKeys)
    .set({ revokedAt: new Date() })
    .where(and(eq(apiKeys.id, keyId), eq(apiKeys.tenantId, tenantId), isNull(apiKeys.revokedAt)))
    .returning({ id: apiKeys.id });
  return rows.length === 1;
}
