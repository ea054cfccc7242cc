/**
 * One racer process for the claim-race test: connects, prints `ready`, waits for `go` on stdin
 * (the parent sends it once every racer is ready, so a slow process start on a loaded machine
 * cannot make the racers miss each other), then tries to claim every given job (in its own
 * shuffled order) with the real claim SQL, and prints one JSON line per attempt. Several of these
 * run at once against one database.
 *   env: DATABASE_URL, RACER_ID, JOB_IDS (comma-separated)
 */
import { randomUUID } from "node:crypto";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import * as schema from "../../src/db/schema";
import { claimJob } from "../lib/single-row-writes";

const { DATABASE_URL, RACER_ID = `racer-${process.pid}`, JOB_IDS = "" } = process.env;
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
const db = drizzle(pool, { schema });
const ids = JOB_IDS.split(",").filter(Boolean);
for (let i = ids.length - 1; i > 0; i--) {
  const j = Math.floor(Math.random() * (i + 1));
  [ids[i], ids[j]] = [ids[j] as string, ids[i] as string];
}
// Open all four lanes' connections before the start line.
await Promise.all([0, 1, 2, 3].map(() => pool.query("select 1")));
process.stdout.write("ready\n");
await new Promise<void>((resolve) => {
  process.stdin.on("data", (d) => {
    if (String(d).includes("go")) resolve();
  });
});
process.stdin.destroy();
const lines: string[] = [];
await Promise.all(
  [0, 1, 2, 3].map(async (lane) => {
    for (let k = lane; k < ids.length; k += 4) {
      const job = ids[k] as string;
      const epoch = await claimJob(db, job, RACER_ID, randomUUID());
      lines.push(JSON.stringify({ racer: RACER_ID, job, won: epoch !== null, epoch }));
    }
  }),
);
process.stdout.write(`${lines.join("\n")}\n`);
await pool.end();
