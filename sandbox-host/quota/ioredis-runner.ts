/**
 * The lease scripts over a direct TCP connection (ioredis) instead of Upstash REST: used by the
 * benchmark and the conformance tests to run the same Lua both ways, and usable by a host that
 * reaches Redis directly. EVALSHA first, EVAL on NOSCRIPT, like the Upstash script helper.
 */
import { createHash } from "node:crypto";
import type { Redis as IORedis } from "ioredis";
import type { LuaRunner } from "../../src/quota/scripts";

export function ioredisLuaRunner(redis: IORedis): LuaRunner {
  const shas = new Map<string, string>();
  return {
    async evalScript(source, keys, args) {
      let sha = shas.get(source);
      if (!sha) {
        sha = createHash("sha1").update(source).digest("hex");
        shas.set(source, sha);
      }
      try {
        return await redis.evalsha(sha, keys.length, ...keys, ...args);
      } catch (err) {
        if (!(err instanceof Error) || !err.message.includes("NOSCRIPT")) throw err;
        return await redis.eval(source, keys.length, ...keys, ...args);
      }
    },
  };
}
