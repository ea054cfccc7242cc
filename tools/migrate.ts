/**
 * Apply the committed drizzle migrations to DATABASE_URL (`npm run db:migrate`). Also exported for
 * the dev stack and the tests, which migrate their throwaway databases the same way.
 */
import { fileURLToPath } from "node:url";
import { drizzle } from "drizzle-orm/node-postgres";
import { migrate } from "drizzle-orm/node-postgres/migrator";
import pg from "pg";

export const MIGRATIONS_DIR = fileURLToPath(new URL("../drizzle", import.meta.url));

export async function applyMigrations(databaseUrl: string): Promise<void> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  try {
    await migrate(drizzle(pool), { migrationsFolder: MIGRATIONS_DIR });
  } finally {
    await pool.end();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const url = process.env.DATABASE_URL;
  if (!url) {
    console.error(
      "DATABASE_URL is not set. Example: DATABASE_URL=postgres://user:pass@127.0.0.1:5432/db npm run db:migrate",
    );
    process.exit(2);
  }
  const started = Date.now();
  applyMigrations(url).then(
    () => console.log(`migrations applied in ${Date.now() - started} ms`),
    (err) => {
      console.error(`migration failed: ${err instanceof Error ? err.message : String(err)}`);
      process.exit(1);
    },
  );
}
