/**
 * Redis replies (ioredis in buffer mode, RESP2) → the JSON values Upstash sends.
 *
 * With `Upstash-Encoding: base64` every string is base64 of its raw bytes, at any depth, except
 * a top-level `"OK"`: @upstash/redis decodes a top-level string unless it is exactly "OK", but
 * base64-decodes every string inside an array, so an "OK" nested in an array must be encoded
 * too (node_modules/@upstash/redis `decode()`). Without the header strings are UTF-8 text, with
 * invalid bytes replaced by U+FFFD, as Upstash documents.
 */

/** What the bridge's raw ioredis commands resolve to in RESP2 buffer mode. */
export type RawReply = Buffer | number | null | Error | RawReply[];

export type JsonReply = string | number | null | JsonReply[];

export type Encoding = "base64" | "utf8";

export function encodeReply(reply: RawReply, encoding: Encoding): JsonReply {
  if (encoding === "base64" && Buffer.isBuffer(reply) && reply.length === 2 && reply.toString("latin1") === "OK") {
    return "OK";
  }
  return encodeNested(reply, encoding);
}

function encodeNested(reply: RawReply, encoding: Encoding): JsonReply {
  if (reply === null || typeof reply === "number") return reply;
  if (Buffer.isBuffer(reply)) return reply.toString(encoding);
  if (Array.isArray(reply)) return reply.map((r) => encodeNested(r, encoding));
  // An error nested in an array (e.g. a Lua table holding redis.error_reply): Upstash has no
  // error-in-array shape, so it travels as its message text.
  return encodeNested(Buffer.from(reply.message, "utf8"), encoding);
}
