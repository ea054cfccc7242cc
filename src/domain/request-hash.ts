/**
 * The fingerprint an idempotency key is bound to: SHA-256 hex (WebCrypto, so the gateway and
 * Node compute it alike) of a canonical JSON form. Canonical means object keys sorted at every
 * depth and no whitespace, so two bodies that mean the same job (`{"a":1,"b":2}` and
 * `{"b":2,"a":1}` in metadata) hash alike, while any difference in content does not.
 */
import type { CreateJobBody } from "../contracts/job";
import { toHex } from "./hex";

const encoder = new TextEncoder();

const ADMISSION_FIELDS = ["priority", "delay_s", "run_at", "ttl_s", "concurrency_key"] as const;

const byKey = ([a]: [string, unknown], [b]: [string, unknown]) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * JSON.stringify with every object's keys sorted: the native serializer with a replacer, measured
 * at ~0.5 ms for a 256 KiB body in Node against ~1.5 ms for a hand-written recursive form (the
 * SHA-256 of the result costs another ~0.9 ms).
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value ?? null, (_key, v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort(byKey)) : v,
  );
}

export async function requestHash(value: unknown): Promise<string> {
  return toHex(await crypto.subtle.digest("SHA-256", encoder.encode(canonicalJson(value))));
}

/**
 * What a job request asks for: every field that shapes the job, with the defaults the row gets
 * filled in (an omitted `tools` and `tools: []` create the same job, so they are the same request).
 * The idempotency key itself is left out: it names the request, it is not part of it. `agent`
 * counts as sent (`name` and `name@3` are different requests even when the latest is 3), and
 * only when sent, so a body without one hashes as it did before agents existed. The admission
 * fields (priority, delay_s, run_at, ttl_s, concurrency_key) count the same way: each only when
 * sent, so a body with none of them hashes as it did before they existed.
 */
export function jobRequestHash(body: CreateJobBody): Promise<string> {
  const admission = Object.fromEntries(ADMISSION_FIELDS.filter((f) => body[f] !== undefined).map((f) => [f, body[f]]));
  return requestHash({
    ...admission,
    kind: "job",
    input: body.input,
    conversation_id: body.conversation_id ?? null,
    ...(body.agent === undefined ? {} : { agent: body.agent }),
    model: body.model ?? null,
    tools: body.tools ?? [],
    metadata: body.metadata ?? {},
  });
}

/** An input is its content; the key (scoped to the job) is, again, only its name. */
export function inputRequestHash(content: string): Promise<string> {
  return requestHash({ kind: "input", content });
}
