/**
 * Reading a request body safely: size capped twice (the declared content-length, then the bytes
 * actually read, since a client may lie or stream without a length), JSON only, and zod failures
 * reported with the field they are about.
 */
import type { z } from "zod";
import { ApiError } from "../../src/contracts/errors";
import { jsonNestingDepth } from "../../src/domain/json-depth";

/**
 * A refused body up to this size is read and discarded before the 413 goes out. Answering while
 * the client is still sending makes the server close a connection with unread bytes, which the
 * client sees as ECONNRESET instead of the 413 (the e2e bad-input test caught it under load).
 * Past this much a client gets the reset: reading more junk is not worth it.
 */
export const REFUSED_BODY_DRAIN_BYTES = 4 * 1024 * 1024;

async function refuseTooLarge(req: Request, maxBytes: number, reader?: ReadableStreamDefaultReader<Uint8Array>) {
  const declared = Number(req.headers.get("content-length") ?? "0");
  const source = reader ?? (declared <= REFUSED_BODY_DRAIN_BYTES ? req.body?.getReader() : undefined);
  if (source && declared <= REFUSED_BODY_DRAIN_BYTES) {
    let drained = 0;
    try {
      while (drained <= REFUSED_BODY_DRAIN_BYTES) {
        const { done, value } = await source.read();
        if (done) break;
        drained += value.byteLength;
      }
    } catch {
      // The client went away: nothing left to answer politely.
    }
  }
  await source?.cancel().catch(() => {});
  return tooLarge(maxBytes);
}

export async function readBodyText(req: Request, maxBytes: number): Promise<string> {
  const bytes = await readBodyBytes(req, maxBytes);
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    throw new ApiError("invalid_json", "request body is not valid UTF-8");
  }
}

/** The raw body, at most `maxBytes` (413 past it, whatever content-length claimed). */
export async function readBodyBytes(req: Request, maxBytes: number): Promise<Uint8Array> {
  const declared = req.headers.get("content-length");
  if (declared !== null && Number(declared) > maxBytes) throw await refuseTooLarge(req, maxBytes);
  if (!req.body) return new Uint8Array(0);
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) throw await refuseTooLarge(req, maxBytes, reader);
    chunks.push(value);
  }
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return bytes;
}

function tooLarge(maxBytes: number): ApiError {
  return new ApiError("payload_too_large", `request body exceeds ${maxBytes} bytes`);
}

export function requireJsonContentType(req: Request): void {
  const type = req.headers.get("content-type")?.split(";")[0]?.trim().toLowerCase();
  if (type !== "application/json") {
    throw new ApiError("unsupported_media_type", "content-type must be application/json");
  }
}

export function parseJson(text: string): unknown {
  if (text.trim() === "") throw new ApiError("invalid_json", "request body is empty; expected a JSON object");
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError("invalid_json", "request body is not valid JSON");
  }
}

/** 400 when `text` nests deeper than `maxDepth` (see jsonNestingDepth). */
export function refuseDeepJson(text: string, maxDepth: number): void {
  if (jsonNestingDepth(text) > maxDepth) {
    throw new ApiError("invalid_request", `request body is nested deeper than ${maxDepth} levels`);
  }
}

/**
 * "input.messages: Too small: expected array to have >=1 items" — at most three issues. `at`
 * names where the value sits in a larger body (`jobs[3]`), before each issue's own path.
 */
export function describeZodError(error: z.ZodError, at?: string): string {
  const parts = error.issues.slice(0, 3).map((issue) => {
    const path = [...(at === undefined ? [] : [at]), ...issue.path.map(String)].join(".");
    return path ? `${path}: ${issue.message}` : issue.message;
  });
  const more = error.issues.length > 3 ? ` (and ${error.issues.length - 3} more)` : "";
  return parts.join("; ") + more;
}

export function validate<S extends z.ZodType>(schema: S, value: unknown): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new ApiError("invalid_request", describeZodError(parsed.error));
  return parsed.data;
}

export async function readJsonBody<S extends z.ZodType>(
  req: Request,
  schema: S,
  maxBytes: number,
): Promise<z.infer<S>> {
  const declared = req.headers.get("content-length");
  if (declared !== null && Number(declared) > maxBytes) throw await refuseTooLarge(req, maxBytes);
  requireJsonContentType(req);
  return validate(schema, parseJson(await readBodyText(req, maxBytes)));
}

/** readJsonBody for a route whose body may be left out: no body at all reads as `{}`. */
export async function readOptionalJsonBody<S extends z.ZodType>(
  req: Request,
  schema: S,
  maxBytes: number,
): Promise<z.infer<S>> {
  const text = await readBodyText(req, maxBytes);
  if (text === "") return validate(schema, {});
  requireJsonContentType(req);
  return validate(schema, parseJson(text));
}
