/**
 * Blob collection: blobs no artifact references any more (their jobs were purged by retention)
 * are deleted from Postgres, then from the R2 bucket. Only the Worker holds the bucket binding, so
 * only the cron does this; hosts never do. A blob is collected once untouched for BLOB_GRACE_S
 * (src/db/artifacts-repo.ts `collectUnreferencedBlobs`), so a host between reserving a blob and
 * recording its artifact does not lose it. Bounded per run (one batch), like the other tasks.
 */
import { collectUnreferencedBlobs } from "../../src/db/artifacts-repo";
import { blobKey } from "../../src/domain/blobs";
import { callDependency } from "../deps";
import type { BackstopTask } from "./backstop-task";

export const blobCollection: BackstopTask = {
  name: "blobs",
  async run({ config, deps, env }) {
    const db = deps.db();
    const doomed = await callDependency("postgres", () => collectUnreferencedBlobs(db, config.blobGraceS * 1000));
    // R2's delete takes up to 1000 keys in one call. A failed delete leaves bytes no row counts
    // (a cost, never a wrong answer); the rows are already gone, so no later run retries them.
    if (doomed.length > 0) {
      await callDependency("r2", () => env.BLOBS.delete(doomed.map((b) => blobKey(b.tenantId, b.sha256))));
    }
    return { blobs_collected: doomed.length };
  },
};
