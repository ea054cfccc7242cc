/**
 * Blobs in the R2 bucket (wrangler.toml BLOBS) and the artifacts that name them. Runtime-neutral:
 * the host builds the upload path, the gateway checks it and names the object.
 */

/** The signed upload route (host → gateway); `:tenant/:sha256` follow it. */
export const BLOB_UPLOAD_PATH = "/internal/blobs";

/** The one object key a tenant's blob has: per tenant, so one tenant never reaches another's bytes. */
export function blobKey(tenantId: string, sha256: string): string {
  return `t/${tenantId}/${sha256}`;
}

export function isSha256Hex(value: string): boolean {
  return /^[0-9a-f]{64}$/.test(value);
}

/** Where an agent leaves the files that become its job's artifacts. */
export const ARTIFACTS_DIR = "/workspace/out";

/**
 * An artifact's path as stored and as addressed in GET /v1/jobs/{id}/artifacts/{path}: relative to
 * /workspace/out, `/`-separated, no empty, `.` or `..` segment, no NUL, at most 1024 bytes.
 */
export function isArtifactPath(path: string): boolean {
  if (path.length === 0 || path.length > 1024 || path.includes("\0")) return false;
  return path.split("/").every((s) => s !== "" && s !== "." && s !== "..");
}

const TYPES: Record<string, string> = {
  txt: "text/plain; charset=utf-8",
  md: "text/markdown; charset=utf-8",
  csv: "text/csv; charset=utf-8",
  json: "application/json",
  html: "text/html; charset=utf-8",
  xml: "application/xml",
  svg: "image/svg+xml",
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  webp: "image/webp",
  pdf: "application/pdf",
  zip: "application/zip",
  gz: "application/gzip",
  tar: "application/x-tar",
  js: "text/javascript; charset=utf-8",
  py: "text/x-python; charset=utf-8",
};

/** By the file name's extension only: the bytes are the agent's, never sniffed. */
export function contentTypeOf(path: string): string {
  const name = path.slice(path.lastIndexOf("/") + 1);
  const dot = name.lastIndexOf(".");
  const ext = dot > 0 ? name.slice(dot + 1).toLowerCase() : "";
  return TYPES[ext] ?? "application/octet-stream";
}
