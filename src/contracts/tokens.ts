/**
 * Short-lived access tokens (docs/api.md, "Tokens"): what a browser holds instead of an API key.
 * An API key mints them with POST /v1/tokens; a token is a JWT (HS256) the gateway verifies with
 * no database round trip, bound to the minting key's tenant, a scope and optionally one job or
 * one conversation. Only a token may travel in a URL (`?access_token=`, on the SSE and WebSocket
 * routes), because URLs end up in logs and a token there soon expires. The plain facts (scopes,
 * TTLs, the URL parameter) are in access.ts, which the zod-free client reads.
 */
import { z } from "zod";
import { TOKEN_SCOPES, TOKEN_TTL } from "./access";
import { conversationIdSchema } from "./job";

export const CreateTokenBodySchema = z
  .object({
    scope: z.enum(TOKEN_SCOPES).default("read"),
    ttl_s: z.number().int().min(1).max(TOKEN_TTL.maxS).default(TOKEN_TTL.defaultS),
    job_id: z.uuid().optional(),
    conversation_id: conversationIdSchema.optional(),
  })
  .strict()
  .refine((b) => b.job_id === undefined || b.conversation_id === undefined, {
    message: "bind a token to one job or one conversation, not both",
    path: ["job_id"],
  });
/** The body as a client writes it (defaults may be left out). */
export type CreateTokenBody = z.input<typeof CreateTokenBodySchema>;

export const TokenAnswerSchema = z.object({
  token: z.string(),
  /** The tenant the token acts for (the minting key's): what a console shows it is signed in as. */
  tenant_id: z.string(),
  token_type: z.literal("Bearer"),
  expires_at: z.iso.datetime(),
  expires_in: z.number().int().min(1),
  scope: z.enum(TOKEN_SCOPES),
  job_id: z.uuid().nullable(),
  conversation_id: z.string().nullable(),
});
export type TokenAnswer = z.infer<typeof TokenAnswerSchema>;
