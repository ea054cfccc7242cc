/**
 * Standard Webhooks signatures (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):
 * `webhook-signature: v1,<base64 HMAC-SHA256>` over `<webhook-id>.<webhook-timestamp>.<body>`,
 * keyed with the base64 bytes after the secret's `whsec_` prefix. WebCrypto only, so the gateway
 * (which makes secrets) and the hosts (which sign) share it; test/integration/webhooks.test.ts
 * verifies what the hosts send with the `standardwebhooks` package.
 */

export const WEBHOOK_SECRET_PREFIX = "whsec_";

const toBase64 = (bytes: Uint8Array) => btoa(String.fromCharCode(...bytes));
const fromBase64 = (s: string) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));

/** A new endpoint secret: `whsec_` and 24 random bytes in base64 (the spec asks 24–64 bytes). */
export function newWebhookSecret(): string {
  return WEBHOOK_SECRET_PREFIX + toBase64(crypto.getRandomValues(new Uint8Array(24)));
}

/** The three Standard Webhooks headers for one attempt of a delivery. */
export async function webhookHeaders(
  secret: string,
  id: string,
  body: string,
  now: Date = new Date(),
): Promise<Record<string, string>> {
  const timestamp = String(Math.floor(now.getTime() / 1000));
  const key = await crypto.subtle.importKey(
    "raw",
    fromBase64(secret.slice(WEBHOOK_SECRET_PREFIX.length)),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const mac = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`${id}.${timestamp}.${body}`));
  return {
    "webhook-id": id,
    "webhook-timestamp": timestamp,
    "webhook-signature": `v1,${toBase64(new Uint8Array(mac))}`,
  };
}
