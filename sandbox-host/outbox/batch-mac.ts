/**
 * The host's side of a batch mac: the same HMAC-SHA256 over the same text as src/domain/signing.ts
 * `batchMac` (which the gateway's verifier mirrors), computed with node:crypto. Why not WebCrypto
 * here: every `crypto.subtle.sign` is an async job with its own copies and promise, measured
 * 22-40 µs of CPU per 2 KB message on this machine against 2.5-3.3 µs for `createHmac`; the
 * outbox signs one batch per running execution per flush, and under `--cpu-prof` with 100
 * concurrent text runs the WebCrypto macs were ~10 % of the host's CPU (docs/capacity.md).
 */
import { createHmac } from "node:crypto";
import { batchMessageText, ingestKeyHex } from "../../src/domain/signing";

/** The execution's ingest key as raw bytes (derived once per execution). */
export async function ingestKeyBytes(token: string, executionId: string): Promise<Buffer> {
  return Buffer.from(await ingestKeyHex(token, executionId), "hex");
}

export function hostBatchMac(key: Buffer, nonce: string, jobId: string, eventsJson: string): string {
  return createHmac("sha256", key)
    .update(batchMessageText(nonce, jobId, eventsJson))
    .digest("hex");
}
