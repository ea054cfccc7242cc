/**
 * API keys: `ear_<prefix>_<secret>`. Only the SHA-256 of the whole key is stored; the prefix is
 * stored in clear so an operator can tell keys apart. A fast hash is right here: keys are 32
 * random bytes, so there is nothing to brute-force that a slow hash would protect.
 */
import { toHex } from "./hex";

const encoder = new TextEncoder();

export async function hashApiKey(key: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", encoder.encode(key));
  return toHex(digest);
}

function randomToken(bytes: number): string {
  const buf = crypto.getRandomValues(new Uint8Array(bytes));
  return toHex(buf);
}

export function generateApiKey(): { key: string; prefix: string } {
  const prefix = randomToken(4);
  return { key: `ear_${prefix}_${randomToken(32)}`, prefix };
}

export function looksLikeApiKey(key: string): boolean {
  return /^ear_[0-9a-f]{8}_[0-9a-f]{64}$/.test(key);
}
