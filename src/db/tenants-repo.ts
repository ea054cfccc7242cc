/** Tenants and their API keys. A key is returned once, at creation; only its hash is stored. */
import { and, eq, isNull } from "drizzle-orm";
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
 * What `tenant set` may change, each field optional (a partial update: what is not named is
 * kept). `dailyBudgetUsd`: US dollars per UTC day (docs/quota.md, "Daily budgets"); null
 * removes the budget.
 */
export interface TenantSettings {
  dailyBudgetUsd?: number | null;
}

/** Apply `settings` to tenant `id`; false when there is no such tenant. */
export async function setTenantSettings(db: Db, id: string, settings: TenantSettings): Promise<boolean> {
  const set: Partial<typeof tenants.$inferInsert> = {};
  if (settings.dailyBudgetUsd !== undefined) set.dailyBudgetUsd = settings.dailyBudgetUsd;
  if (Object.keys(set).length === 0) {
    const found = await db.select({ id: tenants.id }).from(tenants).where(eq(tenants.id, id)).limit(1);
    return found.length === 1;
  }
  const rows = await db.update(tenants).set(set).where(eq(tenants.id, id)).returning({ id: tenants.id });
  return rows.length === 1;
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
