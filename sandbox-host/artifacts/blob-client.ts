/**
 * The host's way into the R2 bucket: the gateway's signed PUT /internal/blobs/{tenant}/{sha256}
 * (workers/routes/internal-blobs.ts). Hosts hold no R2 credentials, only the INTERNAL_SIGNING_SECRET
 * they already sign event batches with. The signature's body is the bytes' SHA-256, which the
 * gateway recomputes, so the upload cannot be altered on the way.
 */

import { sleep } from "../../src/domain/async";
import { BLOB_UPLOAD_PATH } from "../../src/domain/blobs";
import { toHex } from "../../src/domain/hex";
import { signedHeaders } from "../../src/domain/signing";

export interface BlobClientOptions {
  gatewayUrl: string;
  signingSecret: string;
  fetch?: typeof fetch;
  /** Per request (default 30 s: a 32 MiB body on a slow link). */
  timeoutMs?: number;
  /** Tries for an answer that may pass (network error, 5xx); default 3. */
  attempts?: number;
}

export interface BlobStore {
  /** Stores the bytes under the tenant's address `sha256` (idempotent). Throws when it could not. */
  put(tenantId: string, sha256: string, bytes: Uint8Array<ArrayBuffer>): Promise<void>;
  /** The bytes stored under the tenant's address `sha256`, checked against it; null when none are. */
  get(tenantId: string, sha256: string): Promise<Uint8Array<ArrayBuffer> | null>;
}

export interface ArtifactSettings {
  /**
   * SANDBOX_WORKSPACE_MAX_BYTES: a workspace snapshot (gzipped tar of /workspace) larger than this
   * is not taken; a recovery then resets the sandbox as before. At most the 32 MiB blob bound.
   */
  snapshotMaxBytes: number;
  store: BlobStore;
  /** ARTIFACT_MAX_BYTES: the whole of /workspace/out/ as one archive; past it, no artifact is kept. */
  maxBytes: number;
  /** TENANT_STORAGE_MAX_BYTES: the tenant's blobs together; a new blob past it is not stored. */
  tenantCapBytes: number;
}

/** 32 MiB: the gateway's bound on one blob (workers/routes/internal-blobs.ts BLOB_MAX_BYTES). */
export const ARTIFACT_MAX_BYTES_DEFAULT = 32 * 1024 * 1024;
/** 1 GiB of blobs per tenant. */
export const TENANT_STORAGE_MAX_BYTES_DEFAULT = 1024 * 1024 * 1024;

export function createBlobClient(opts: BlobClientOptions): BlobStore {
  const attempts = opts.attempts ?? 3;
  return {
    async put(tenantId, sha256, bytes) {
      const url = new URL(`${BLOB_UPLOAD_PATH}/${tenantId}/${sha256}`, opts.gatewayUrl);
      let last: unknown = null;
      for (let attempt = 1; attempt <= attempts; attempt++) {
        try {
          const headers = await signedHeaders(opts.signingSecret, "PUT", url.pathname, sha256);
          const res = await (opts.fetch ?? fetch)(url, {
            method: "PUT",
            headers: { ...headers, "content-type": "application/octet-stream" },
            body: bytes,
            signal: AbortSignal.timeout(opts.timeoutMs ?? 30_000),
          });
          const text = await res.text();
          if (res.ok) return;
          last = new Error(`blob upload answered ${res.status}: ${text.slice(0, 200)}`);
          if (res.status < 500) break;
        } catch (err) {
          last = err;
        }
        if (attempt < attempts) await sleep(200 * 2 ** (attempt - 1));
      }
      throw last instanceof Error ? last : new Error(String(last));
    },

    async get(tenantId, sha256) {
      const url = new URL(`${BLOB_UPLOAD_PATH}/${tenantId}/${sha256}`, opts.gatewayUrl);
      const headers = await signedHeaders(opts.signingSecret, "GET", url.pathname, sha256);
      const res = await (opts.fetch ?? fetch)(url, {
        headers,
        signal: AbortSignal.timeout(opts.timeoutMs ?? 30_000),
      });
      if (res.status === 404) {
        await res.arrayBuffer();
        return null;
      }
      if (!res.ok) throw new Error(`blob read answered ${res.status}: ${(await res.text()).slice(0, 200)}`);
      const bytes = new Uint8Array(await res.arrayBuffer());
      // The address is the content's hash: bytes that are not it are not the blob asked for.
      if (toHex(await crypto.subtle.digest("SHA-256", bytes)) !== sha256)
        throw new Error("blob read: bytes do not match their address");
      return bytes;
    },
  };
}
