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
 * One deployment signs with one secret: its imported key is kept. The resolved CryptoKey is kept,
 * not the promise, so no request ever waits on a promise another request created (workerd).
 */
let imported: { secret: string; key: CryptoKey } | null = null;

async function hmacKey(secret: string): Promise<CryptoKey> {
  if (imported?.secret === secret) return imported.key;
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
    "verify",
  ]);
  imported = { secret, key };
  return key;
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
): Promise<SignedHeaders> {
  const timestamp = String(now);
  const nonce = crypto.randomUUID();
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
): Promise<Record<string, string>> {
  const signed = await signRequest(secret, method, path, body);
  return {
    "content-type": "application/json",
    [INTERNAL_HEADERS.timestamp]: signed.timestamp,
    [INTERNAL_HEADERS.nonce]: signed.nonce,
    [INTERNAL_HEADERS.signature]: signed.signature,
  };
}

export type VerifyResult = { ok: true } | { ok: false; reason: "missing" | "stale" | "bad_signature" };

export async function verifyRequest(
  secret: string,
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
  const key = await hmacKey(secret);
  // crypto.subtle.verify compares in constant time.
  const ok = await crypto.subtle.verify(
    "HMAC",
    key,
    sigBytes,
    encoder.encode(canonical(method, path, timestamp, nonce, body)),
  );
  return ok ? { ok: true } : { ok: false, reason: "bad_signature" };
}
