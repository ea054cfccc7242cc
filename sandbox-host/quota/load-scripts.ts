/**
 * Loads the lease scripts from src/quota/lua at host startup (async fs, once). The .lua files
 * stay the single source of truth; `src/quota` only ever sees the text (it cannot read files in
 * a Worker). test/integration/quota-store.test.ts checks the text equals the files.
 */
import { readFile } from "node:fs/promises";
import { QUOTA_SCRIPT_NAMES, type QuotaScripts } from "../../src/quota/scripts";

export const QUOTA_LUA_DIR = new URL("../../src/quota/lua/", import.meta.url);

export async function loadQuotaScripts(dir: URL = QUOTA_LUA_DIR): Promise<QuotaScripts> {
  const texts = await Promise.all(QUOTA_SCRIPT_NAMES.map((name) => readFile(new URL(`${name}.lua`, dir), "utf8")));
  const [acquire = "", renew = "", release = ""] = texts;
  return { acquire, renew, release };
}
