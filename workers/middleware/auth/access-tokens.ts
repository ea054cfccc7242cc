/**
 * Access tokens: signed with hono/jwt (HS256; hono is already the gateway's framework, so no new
 * dependency), verified with no database round trip: the signature, the expiry and the claims
 * are all a token needs. What a token may do (scope, binding) is `tokenAllows`, below.
 *
 * Keys: TOKEN_SIGNING_SECRET signs, and TOKEN_SIGNING_SECRET_PREVIOUS is still accepted during a
 * rotation (set the new secret, keep the old one as _PREVIOUS for at least the longest TTL, 24 h,
 * then drop it). Unset, the key is HMAC-SHA256(INTERNAL_SIGNING_SECRET, KEY_DERIVATION_LABEL):
 * a deployment works without a new secret, and the derived key is not the internal secret
 * itself, so a token can never serve as a host's ingest signature or the reverse. The keys are
 * imported once per configuration (as CryptoKeys, so hono never re-imports a string per call).
 *
 * A token carries `kh`, the SHA-256 of the API key that minted it, as its rate-limit identity:
 * its requests count against that key's limit, so minting tokens never adds request budget. The
 * hash reveals nothing of the key (32 random bytes) and is already the key's public handle.
 */
import { sign, verify } from "hono/jwt";
import { z } from "zod";
import { TOKEN_SCOPES, TOKEN_TTL, type TokenScope } from "../../../src/contracts/access";
import type { TokenAnswer } from "../../../src/contracts/tokens";
import type { GatewayConfig } from "../../gateway-config";

const ISSUER = "ear";
const AUDIENCE = "ear-api";
const ALG = "HS256";
const KEY_DERIVATION_LABEL = "ear-access-token-v1";
/** Clock skew tolerated on `iat` between gateway isolates. */
const IAT_SKEW_S = 60;

/** What a verified token says. */
export interface AccessGrant {
  tenantId: string;
  scope: TokenScope;
  jobId: string | null;
  conversationId: string | null;
  /** The minting API key's SHA-256 (hex): the rate-limit identity. */
  keyHash: string;
  expiresAt: number;
}

const ClaimsSchema = z
  .object({
    iss: z.literal(ISSUER),
    aud: z.literal(AUDIENCE),
    sub: z.string().min(1),
    iat: z.number().int(),
    exp: z.number().int(),
    scope: z.enum(TOKEN_SCOPES),
    job_id: z.string().optional(),
    conversation_id: z.string().optional(),
    kh: z.string().regex(/^[0-9a-f]{64}$/),
  })
  // A token this gateway minted never lives longer than the maximum; one that does was not minted here.
  .refine((c) => c.exp - c.iat <= TOKEN_TTL.maxS && c.iat <= Math.floor(Date.now() / 1000) + IAT_SKEW_S);

const keyCache = new WeakMap<GatewayConfig, Promise<CryptoKey[]>>();

const encoder = new TextEncoder();
const hmacKey = (raw: BufferSource) =>
  crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);

async function derivedKey(internalSecret: string): Promise<CryptoKey> {
  const bytes = await crypto.subtle.sign(
    "HMAC",
    await hmacKey(encoder.encode(internalSecret)),
    encoder.encode(KEY_DERIVATION_LABEL),
  );
  return hmacKey(bytes);
}

/** The signing key first, then the keys still accepted. */
function tokenKeys(config: GatewayConfig): Promise<CryptoKey[]> {
  let keys = keyCache.get(config);
  if (!keys) {
    keys = Promise.all(
      config.tokenSecrets === null
        ? config.signingSecrets.map(derivedKey)
        : config.tokenSecrets.map((s) => hmacKey(encoder.encode(s))),
    );
    keyCache.set(config, keys);
  }
  return keys;
}

export async function mintToken(
  config: GatewayConfig,
  grant: {
    tenantId: string;
    keyHash: string;
    scope: TokenScope;
    ttlS: number;
    jobId?: string;
    conversationId?: string;
  },
  nowMs = Date.now(),
): Promise<TokenAnswer> {
  // JWT times are whole seconds. Rounded down, a 1 s token minted in a second's last millisecond
  // was expired on arrival (CI: a ttl_s 1 token refused on its first use); rounded up, a token
  // lives at least its ttl_s and at most 1 s more, and `iat` is at most 1 s ahead (IAT_SKEW_S).
  const iat = Math.ceil(nowMs / 1000);
  const exp = iat + grant.ttlS;
  const [key] = await tokenKeys(config);
  if (!key) throw new Error("no token signing key");
  const token = await sign(
    {
      iss: ISSUER,
      aud: AUDIENCE,
      sub: grant.tenantId,
      iat,
      exp,
      scope: grant.scope,
      ...(grant.jobId !== undefined ? { job_id: grant.jobId } : {}),
      ...(grant.conversationId !== undefined ? { conversation_id: grant.conversationId } : {}),
      kh: grant.keyHash,
    },
    key,
    ALG,
  );
  return {
    token,
    tenant_id: grant.tenantId,
    token_type: "Bearer",
    expires_at: new Date(exp * 1000).toISOString(),
    expires_in: grant.ttlS,
    scope: grant.scope,
    job_id: grant.jobId ?? null,
    conversation_id: grant.conversationId ?? null,
  };
}

/**
 * The grant of a valid token, or null for anything else: a bad signature under every accepted
 * key, another algorithm (`alg: none` included: hono refuses a header whose alg is not HS256),
 * expired, issued in the future, missing or malformed claims.
 */
export async function verifyToken(config: GatewayConfig, token: string): Promise<AccessGrant | null> {
  for (const key of await tokenKeys(config)) {
    let payload: unknown;
    try {
      // `iat` is checked below with a skew allowance: hono's own check has none, and a token
      // minted in one isolate must not be refused by another whose clock is a second behind.
      payload = await verify(token, key, { alg: ALG, iss: ISSUER, aud: AUDIENCE, iat: false });
    } catch (err) {
      // Only a signature mismatch is worth trying the next key for; expired or malformed is final.
      if (err instanceof Error && err.name === "JwtTokenSignatureMismatched") continue;
      return null;
    }
    const claims = ClaimsSchema.safeParse(payload);
    if (!claims.success) return null;
    return {
      tenantId: claims.data.sub,
      scope: claims.data.scope,
      jobId: claims.data.job_id ?? null,
      conversationId: claims.data.conversation_id ?? null,
      keyHash: claims.data.kh,
      expiresAt: claims.data.exp * 1000,
    };
  }
  return null;
}

/**
 * Whether a token may make this request, and if not, why (the 403's message). One rule for every
 * route, present and future, so a new route cannot forget it:
 * - `read` may only GET (a WebSocket upgrade is a GET, but the chat socket submits jobs: write);
 * - a job-bound token reaches only /v1/jobs/<its id> and below; a conversation-bound one only
 *   /v1/conversations/<its id> and below (so neither can list, submit, or see anything else);
 * - no token mints tokens (a token can never widen itself).
 */
export function tokenAllows(grant: AccessGrant, method: string, path: string, upgrade: boolean): string | null {
  if (path === "/v1/tokens") return "a token cannot mint tokens: POST /v1/tokens needs an API key";
  const writes = !(method === "GET" || method === "HEAD") || upgrade;
  if (writes && grant.scope !== "write") return "this token's scope is read: it can only read (GET)";
  // Compared by decoded path segment, as the router reads its :id (a client may escape ":").
  const segments = path.split("/").map(decodeSegment);
  const within = (collection: string, id: string) =>
    segments[1] === "v1" && segments[2] === collection && segments[3] === id;
  if (grant.jobId !== null && !within("jobs", grant.jobId)) return `this token is bound to job ${grant.jobId}`;
  if (grant.conversationId !== null && !within("conversations", grant.conversationId)) {
    return `this token is bound to conversation ${grant.conversationId}`;
  }
  return null;
}

function decodeSegment(segment: string): string | null {
  try {
    return decodeURIComponent(segment);
  } catch {
    return null;
  }
}
