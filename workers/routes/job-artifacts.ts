/**
 * A job's artifacts (docs/api.md "Artifacts"): the files its run left under /workspace/out/,
 * listed from Postgres and served from the R2 bucket. Reached like every /v1/jobs/{id} route: an
 * API key of the job's tenant, or a token bound to this job (or unbound) of that tenant; another
 * tenant's job, or a path the job has no artifact at, is 404.
 */
import { ArtifactListSchema } from "../../src/contracts/artifacts";
import { ApiError } from "../../src/contracts/errors";
import { jobIdParam, V1_ERRORS } from "../../src/contracts/openapi";
import { getArtifact, listArtifacts } from "../../src/db/artifacts-repo";
import { blobKey, isArtifactPath } from "../../src/domain/blobs";
import { callDependency } from "../deps";
import { missingJob } from "./jobs";
import { route, routes } from "./route";

export const jobArtifactRoutes = routes(
  route({
    method: "get",
    path: "/:id/artifacts",
    operationId: "listJobArtifacts",
    tag: "jobs",
    summary: "The files the job's run left under /workspace/out/",
    description:
      "Recorded when the run ends (completed, failed or cancelled), before its terminal event; empty for a run that used no sandbox or left nothing there.",
    auth: "bearer",
    parameters: [jobIdParam],
    responses: [{ status: 200, description: "The artifacts, in path order.", schema: ArtifactListSchema }],
    errors: ["not_found", "gone", ...V1_ERRORS],
    handler: async (c) => {
      const db = c.get("deps").db();
      const tenantId = c.get("tenantId");
      const id = c.req.param("id");
      const artifacts = await callDependency("postgres", () => listArtifacts(db, tenantId, id));
      if (!artifacts) throw await missingJob(db, tenantId, id);
      return c.json({
        artifacts: artifacts.map((a) => ({
          path: a.path,
          bytes: a.bytes,
          sha256: a.sha256,
          content_type: a.contentType,
        })),
      });
    },
  }),
  route({
    method: "get",
    path: "/:id/artifacts/:path{.+}",
    operationId: "getJobArtifact",
    tag: "jobs",
    summary: "One artifact's bytes",
    description:
      "The file as the run left it, with its `content-type`, `content-length`, an `etag` of its SHA-256 and `content-disposition: attachment` (a browser saves it rather than rendering the agent's HTML on the gateway's origin).",
    auth: "bearer",
    parameters: [
      jobIdParam,
      {
        name: "path",
        in: "path",
        required: true,
        description: "The artifact's path relative to /workspace/out/ (its segments URL-encoded; `/` separates them).",
        schema: { type: "string" },
      },
    ],
    responses: [
      {
        status: 200,
        description: "The bytes.",
        content: {
          "application/octet-stream": { schema: { type: "string", contentMediaType: "application/octet-stream" } },
        },
      },
    ],
    errors: ["not_found", "gone", ...V1_ERRORS],
    handler: async (c) => {
      const db = c.get("deps").db();
      const tenantId = c.get("tenantId");
      const id = c.req.param("id");
      // Hono has decoded the parameter (a `%2F` in a name is a `/` here, like a `/`).
      const path = c.req.param("path");
      const found = isArtifactPath(path)
        ? await callDependency("postgres", () => getArtifact(db, tenantId, id, path))
        : { job: (await callDependency("postgres", () => listArtifacts(db, tenantId, id))) !== null, artifact: null };
      if (!found.job) throw await missingJob(db, tenantId, id);
      const artifact = found.artifact;
      if (!artifact) throw new ApiError("not_found", "the job has no artifact at this path");
      const object = await callDependency("r2", () => c.env.BLOBS.get(blobKey(tenantId, artifact.sha256)));
      if (!object) {
        // The row names bytes the bucket does not hold: an upload that never landed. Said as such.
        throw new ApiError("not_found", "the artifact's bytes are not in the blob store");
      }
      const name = artifact.path.slice(artifact.path.lastIndexOf("/") + 1);
      return new Response(object.body, {
        headers: {
          "content-type": artifact.contentType,
          "content-length": String(artifact.bytes),
          etag: `"${artifact.sha256}"`,
          "content-disposition": `attachment; filename*=UTF-8''${encodeURIComponent(name)}`,
          "x-content-type-options": "nosniff",
        },
      });
    },
  }),
);
