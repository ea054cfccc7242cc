/** A job's artifacts (docs/api.md "Artifacts"): the files its run left under /workspace/out/. */
import { z } from "zod";

export const ArtifactViewSchema = z.object({
  /** Relative to /workspace/out/, `/`-separated. */
  path: z.string(),
  bytes: z.number().int().nonnegative(),
  /** Lower-case hex SHA-256 of the bytes (the blob's address). */
  sha256: z.string(),
  /** From the file name's extension; application/octet-stream when unknown. */
  content_type: z.string(),
});
export type ArtifactView = z.infer<typeof ArtifactViewSchema>;

export const ArtifactListSchema = z.object({ artifacts: z.array(ArtifactViewSchema) });
export type ArtifactList = z.infer<typeof ArtifactListSchema>;

/** The signed upload's answer (host → gateway). */
export const BlobUploadAnswerSchema = z.object({ sha256: z.string(), bytes: z.number().int().nonnegative() });
