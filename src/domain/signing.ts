/**
 * HMAC signing of internal requests (host → gateway ingest). WebCrypto only, so the same code
 * runs in workerd and in Node ≥ 20. The signature covers method, path, timestamp, nonce and
 * body; the verifier also checks freshness, and the receiver remembers nonces to reject replays.
 */
import { INTERNAL_HEADERS } from "../contracts/events";
import { toHex } from "./hex";

const encoder = new TextEncoder();

export const SIGNATURE_MAX_SKEW_MS = 60_000;

/**
 * A deployment verifies with at most two secrets (current and previous, during a rotation): their
 * imported keys are kept. The resolved CryptoKey is kept, not the promise, so no request ever
 * waits on a promise another request created (workerd).
 */
const imported = new Map<string, CryptoKey>();
const MAX_IMPORTED_SECRETS = 4;

async function hmacKey(secret: string): Promise<CryptoKey> {
  const cached = imported.get(secret);
  if (cached) return cached;
  const key = await importHmacKey(encoder.encode(secret));
  if (imported.size >= MAX_IMPORTED_SECRETS) imported.clear();
  imported.set(secret, key);
  return key;
}

function importHmacKey(raw: BufferSource): Promise<CryptoKey> {
  return crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
}

function fromHex(hex: string): Uint8Array<ArrayBuffer> | null {
  if (!/^[0-9a-f]*$/.test(hex) || hex.length % 2 !== 0) return null;
  const out = new Uint8Array(new ArrayBuffer(hex.length / 2));
  for (let i = 0; i < out.length; i++) out[i] = Number.parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  return out;
}

function canonical(method: string, path: string, timestamp: string, nonce: string, body: string): string {
  return `${method.toUpperCase()}\n${path}\n${timestamp}\n${nonce}\n${body}`;
}

export interface SignedHeaders {
  timestamp: string;
  nonce: string;
  signature: string;
}

export async function signRequest(
  secret: string,
  method: string,
  path: string,
  body: string,
  now = Date.now(),
  nonce: string = crypto.randomUUID(),
): Promise<SignedHeaders> {
  const timestamp = String(now);
  const key = await hmacKey(secret);
  const sig = await crypto.subtle.sign("HMAC", key, encoder.encode(canonical(method, path, timestamp, nonce, body)));
  return { timestamp, nonce, signature: toHex(sig) };
}

/** The headers of a signed internal JSON request (host → gateway), ready for fetch. */
export async function signedHeaders(
  secret: string,
  method: string,
  path: string,
  body: string,
  nonce?: string,
): Promise<Record<string, string>> {
  const signed = await signRequest(secret, method, path, body, Date.now(), nonce);
  return {
    "content-type": "application/json",
    [INTERNAL_HEADERS.timestamp]: signed.timestamp,
    [INTERNAL_HEADERS.nonce]: signed.nonce,
    [INTERNAL_HEADERS.signature]: signed.signature,
  };
}

export type VerifyResult = { ok: true } | { ok: false; reason: "missing" | "stale" | "bad_signature" };

/**
 * Accepts a signature made with any of `secrets` (the current one and, during a rotation, the
 * previous one): hosts can move to a new secret one by one while the gateway takes both.
 */
export async function verifyRequest(
  secrets: string | readonly string[],
  method: string,
  path: string,
  body: string,
  headers: Partial<SignedHeaders>,
  now = Date.now(),
): Promise<VerifyResult> {
  const { timestamp, nonce, signature } = headers;
  if (!timestamp || !nonce || !signature) return { ok: false, reason: "missing" };
  const ts = Number(timestamp);
  if (!Number.isFinite(ts) || Math.abs(now - ts) > SIGNATURE_MAX_SKEW_MS) return { ok: false, reason: "stale" };
  const sigBytes = fromHex(signature);
  if (!sigBytes) return { ok: false, reason: "bad_signature" };
  const message = encoder.encode(canonical(method, path, timestamp, nonce, body));
  for (const secret of typeof secrets === "string" ? [secrets] : secrets) {
    // crypto.subtle.verify compares in constant time.
    if (await crypto.subtle.verify("HMAC", await hmacKey(secret), sigBytes, message)) return { ok: true };
  }
  return { ok: false, reason: "bad_signature" };
}

/**
 * The per-execution ingest key: HMAC-SHA256 keyed by the claim token the execution started under,
 * over a label and the execution id. Only Postgres (executions.token) and the owning host know
 * the token, so the shared signing secret alone cannot produce a batch another execution accepts.
 */
export async function deriveIngestKey(token: string, executionId: string): Promise<CryptoKey> {
  return importIngestKey(await ingestKeyHex(token, executionId));
}

/** The ingest key's bytes as hex, for a verifier that caches it (the JobEvents object). */
export async function ingestKeyHex(token: string, executionId: string): Promise<string> {
  const tokenKey = await importHmacKey(encoder.encode(token.toLowerCase()));
  return toHex(await crypto.subtle.sign("HMAC", tokenKey, encoder.encode(`ear-ingest-v1:${executionId}`)));
}

export function importIngestKey(hex: string): Promise<CryptoKey> {
  const bytes = fromHex(hex);
  if (bytes?.length !== 32) throw new Error("an ingest key is 32 bytes of lower-case hex");
  return importHmacKey(bytes);
}

/** What a batch mac covers (the host's node:crypto signer, sandbox-host/outbox/batch-mac.ts, uses it too). */
export function batchMessageText(nonce: string, jobId: string, eventsJson: string): string {
  return `${nonce}\n${jobId}\n${eventsJson}`;
}

function batchMessage(nonce: string, jobId: string, eventsJson: string): BufferSource {
  return encoder.encode(batchMessageText(nonce, jobId, eventsJson));
}

/**
 * The mac of one batch of a signed ingest request: over the request's nonce (so a batch cannot be
 * lifted into another request), the job id and the events exactly as serialized on the wire.
 */
export async function batchMac(key: CryptoKey, nonce: string, jobId: string, eventsJson: string): Promise<string> {
  return toHex(await crypto.subtle.sign("HMAC", key, batchMessage(nonce, jobId, eventsJson)));
}

export async function verifyBatchMac(
  key: CryptoKey,
  nonce: string,
  jobId: string,
  eventsJson: string,
  mac: string,
): Promise<boolean> {
  const bytes = fromHex(mac);
  if (bytes?.length !== 32) return false;
  return crypto.subtle.verify("HMAC", key, bytes, batchMessage(nonce, jobId, eventsJson));
}
