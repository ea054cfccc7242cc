/**
 * PUT /internal/blobs/{tenant}/{sha256} — a host stores a blob (an artifact's bytes, a workspace
 * snapshot) in the R2 bucket; GET reads one back (a snapshot to restore). Hosts hold no R2 credentials: they reach the bucket only through this route, signed
 * like the event ingest with INTERNAL_SIGNING_SECRET (docs/architecture.md "Blobs and artifacts"
 * says why this and not R2's S3 API). The signature's body is the hex SHA-256 of the bytes, and the
 * route hashes what it received: bytes that do not match the address they were signed for are
 * refused (400) before anything is stored, so the address is always the content's hash.
 *
 * Idempotent: the same bytes again overwrite the object with the same bytes. The host has
 * reserved the blob's row (Postgres, src/db/artifacts-repo.ts) before it calls, so the tenant's
 * storage cap is the host's check; this route stores what a signed host sends.
 */
import { BlobUploadAnswerSchema } from "../../src/contracts/artifacts";
import { ApiError } from "../../src/contracts/errors";
import { INTERNAL_HEADERS } from "../../src/contracts/events";
import { internalHeaderParams } from "../../src/contracts/openapi";
import { BLOB_UPLOAD_PATH, blobKey, isSha256Hex } from "../../src/domain/blobs";
import { toHex } from "../../src/domain/hex";
import { verifyRequest } from "../../src/domain/signing";
import { TENANT_ID_RE } from "../../src/domain/tenant-id";
import { callDependency } from "../deps";
import { log } from "../log";
import { readBodyBytes } from "../request/body";
import { route, routes } from "./route";

/**
 * One blob at most this large. A Worker's request body is bounded by the plan (100 MB on Free and
 * Pro); the host reads an artifact into memory to hash it, so a smaller bound keeps both sides'
 * memory predictable. The host's own bound (ARTIFACT_MAX_BYTES) is the same figure.
 */
export const BLOB_MAX_BYTES = 32 * 1024 * 1024;

const BLOB_PARAMETERS = [
  {
    name: "tenant",
    in: "path",
    required: true,
    description: "The tenant the blob is stored for.",
    schema: { type: "string" },
  },
  {
    name: "sha256",
    in: "path",
    required: true,
    description: "Lower-case hex SHA-256 of the bytes.",
    schema: { type: "string" },
  },
  ...internalHeaderParams,
];

export const internalBlobRoutes = routes(
  route({
    method: "put",
    path: `${BLOB_UPLOAD_PATH}/:tenant/:sha256`,
    operationId: "putBlob",
    tag: "internal",
    summary: "Hosts store a blob in the R2 bucket (signed; not for API clients)",
    description:
      "The body is the raw bytes. The signature (as for ingestEvents) covers the method, the path and, as its body, the hex SHA-256 of the bytes; the route hashes what it received and refuses bytes whose hash is not the path's (400).",
    auth: "signature",
    parameters: BLOB_PARAMETERS,
    requestBody: { type: "string", contentMediaType: "application/octet-stream" },
    responses: [{ status: 201, description: "Stored.", schema: BlobUploadAnswerSchema }],
    errors: ["invalid_request", "payload_too_large", "unauthorized", "dependency_unavailable", "internal"],
    handler: async (c) => {
      const tenant = c.req.param("tenant");
      const sha256 = c.req.param("sha256");
      const bytes = await readBodyBytes(c.req.raw, BLOB_MAX_BYTES);
      const received = toHex(await crypto.subtle.digest("SHA-256", bytes));
      await verifySigned(c.get("config").signingSecrets, c.req.raw, received);
      checkAddress(tenant, sha256);
      if (received !== sha256) throw new ApiError("invalid_request", "the body's SHA-256 is not the path's");
      await callDependency("r2", () => c.env.BLOBS.put(blobKey(tenant, sha256), bytes));
      return c.json({ sha256, bytes: bytes.byteLength }, 201);
    },
  }),
  route({
    method: "get",
    path: `${BLOB_UPLOAD_PATH}/:tenant/:sha256`,
    operationId: "getBlob",
    tag: "internal",
    summary: "Hosts read a blob back (a workspace snapshot to restore; signed; not for API clients)",
    description:
      "Signed like putBlob, with the path's hex SHA-256 as the signature's body. 404 when the bucket holds no such object.",
    auth: "signature",
    parameters: BLOB_PARAMETERS,
    responses: [
      {
        status: 200,
        description: "The bytes.",
        content: {
          "application/octet-stream": { schema: { type: "string", contentMediaType: "application/octet-stream" } },
        },
      },
    ],
    errors: ["invalid_request", "unauthorized", "not_found", "dependency_unavailable", "internal"],
    handler: async (c) => {
      const tenant = c.req.param("tenant");
      const sha256 = c.req.param("sha256");
      await verifySigned(c.get("config").signingSecrets, c.req.raw, sha256);
      checkAddress(tenant, sha256);
      const object = await callDependency("r2", () => c.env.BLOBS.get(blobKey(tenant, sha256)));
      if (!object) throw new ApiError("not_found", "no such blob");
      return new Response(object.body, {
        headers: { "content-type": "application/octet-stream", "content-length": String(object.size) },
      });
    },
  }),
);

/** The request's signature over its method, path and `body` (the bytes' hash); 401 when it is not ours. */
async function verifySigned(secrets: readonly string[], req: Request, body: string): Promise<void> {
  const verdict = await verifyRequest(secrets, req.method, new URL(req.url).pathname, body, {
    timestamp: req.headers.get(INTERNAL_HEADERS.timestamp) ?? undefined,
    nonce: req.headers.get(INTERNAL_HEADERS.nonce) ?? undefined,
    signature: req.headers.get(INTERNAL_HEADERS.signature) ?? undefined,
  });
  if (!verdict.ok) {
    log.warn("rejected internal request", { reason: verdict.reason, path: BLOB_UPLOAD_PATH });
    throw new ApiError("unauthorized", `request signature rejected (${verdict.reason})`);
  }
}

function checkAddress(tenant: string, sha256: string): void {
  if (!TENANT_ID_RE.test(tenant) || !isSha256Hex(sha256)) {
    throw new ApiError("invalid_request", "the path must be /internal/blobs/<tenant id>/<hex sha256>");
  }
}
