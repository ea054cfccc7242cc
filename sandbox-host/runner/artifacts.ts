/**
 * A run's artifacts (docs/api.md "Artifacts"): at the end of a run that used a sandbox, the files
 * it left under /workspace/out/ are packed in the sandbox (`tar`, one exec), hashed (WebCrypto,
 * off the event loop), each new blob reserved against the tenant's storage cap in Postgres and
 * uploaded through the gateway into R2, and the artifact rows written under the run's fence —
 * all before the terminal write, so a client that sees the run end finds its artifacts listed.
 *
 * Best effort by design: the run's outcome is the agent's, so a failure here (the gateway away,
 * the cap reached, the directory past ARTIFACT_MAX_BYTES) is logged with its reason and the run
 * ends as it would have, with the artifacts it could store. Nothing is retried after the run.
 */

import { type ArtifactRecord, recordArtifacts, reserveBlob } from "../../src/db/artifacts-repo";
import { ARTIFACTS_DIR, contentTypeOf, isArtifactPath } from "../../src/domain/blobs";
import { toHex } from "../../src/domain/hex";
import { errorFields } from "../log";
import { readTarFiles } from "../sandbox/tar";
import type { Execution } from "./run-context";

/** How long packing /workspace/out/ may take (a cancelled run's signal is not used: it is aborted). */
const PACK_TIMEOUT_MS = 30_000;

export async function collectArtifacts(exec: Execution): Promise<number> {
  const { deps, id, run } = exec;
  const settings = deps.artifacts;
  if (!settings || !deps.sandbox || !run.sandboxUsed || !run.owned) return 0;
  const fields = exec.fields;
  try {
    const packed = await deps.sandbox.packDir(id.executionId, ARTIFACTS_DIR, settings.maxBytes, {
      timeoutMs: PACK_TIMEOUT_MS,
    });
    if (packed.tooLarge) {
      deps.log.warn("artifacts not kept: /workspace/out/ is larger than ARTIFACT_MAX_BYTES", {
        ...fields,
        max_bytes: settings.maxBytes,
      });
      return 0;
    }
    if (!packed.archive) return 0;
    const tenantId = exec.job.tenantId;
    const records: ArtifactRecord[] = [];
    for (const file of readTarFiles(packed.archive)) {
      if (!isArtifactPath(file.path)) continue;
      const sha256 = toHex(await crypto.subtle.digest("SHA-256", file.data));
      const reserved = await reserveBlob(deps.db, tenantId, sha256, file.data.byteLength, settings.tenantCapBytes);
      if (reserved === "over_cap") {
        deps.log.warn("artifact not kept: the tenant's storage is at TENANT_STORAGE_MAX_BYTES", {
          ...fields,
          path: file.path,
          bytes: file.data.byteLength,
        });
        continue;
      }
      // Uploaded even when the row existed: the bytes of an earlier upload that failed after its
      // reservation would otherwise never arrive (a PUT of the same bytes is harmless).
      await settings.store.put(tenantId, sha256, file.data);
      records.push({ path: file.path, bytes: file.data.byteLength, sha256, contentType: contentTypeOf(file.path) });
    }
    if (!(await recordArtifacts(deps.db, id, records))) {
      deps.log.warn("artifacts not recorded: the run no longer owns its job", fields);
      return 0;
    }
    return records.length;
  } catch (err) {
    deps.log.error("artifacts not collected", { ...fields, ...errorFields(err) });
    return 0;
  }
}
