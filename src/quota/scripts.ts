/**
 * How the lease store runs its Lua. The .lua files in ./lua are the single source of truth, but
 * neither a Worker nor `src/` can read files, so the text is injected: sandbox-host loads it at
 * startup (sandbox-host/quota/load-scripts.ts), a Worker bundle would import it as text.
 * A test asserts the loaded text equals the files byte for byte.
 */
import type { Redis } from "./redis";

/** Source text of the lease scripts (src/quota/lua/{acquire,renew,release,settle}.lua). */
export interface QuotaScripts {
  acquire: string;
  renew: string;
  release: string;
  /** Budget reservations are taken by acquire and renewed by renew; settle ends them. */
  settle: string;
}

export const QUOTA_SCRIPT_NAMES = [
  "acquire",
  "renew",
  "release",
  "settle",
] as const satisfies readonly (keyof QuotaScripts)[];

/**
 * Runs a script by its text: EVALSHA first, EVAL on NOSCRIPT (a Redis restart or SCRIPT FLUSH
 * forgets cached scripts). Results are integers and arrays of integers only: holder ids never
 * come back as strings, so @upstash/redis's automatic JSON deserialization cannot reshape them.
 */
export interface LuaRunner {
  evalScript(source: string, keys: string[], args: string[]): Promise<unknown>;
}

/** The production runner: the @upstash/redis script helper (EVALSHA → EVAL on NOSCRIPT). */
export function upstashLuaRunner(redis: Redis): LuaRunner {
  const cache = new Map<string, ReturnType<Redis["createScript"]>>();
  return {
    evalScript(source, keys, args) {
      let script = cache.get(source);
      if (!script) {
        script = redis.createScript(source);
        cache.set(source, script);
      }
      return script.exec(keys, args);
    },
  };
}

export function isLuaRunner(x: unknown): x is LuaRunner {
  return typeof (x as LuaRunner | null)?.evalScript === "function";
}
