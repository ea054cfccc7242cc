/**
 * Loads the lease scripts from src/quota/lua at host startup (async fs, once). The .lua files
 * stay the single source of truth; `src/quota` only ever sees the text (it cannot read files in
 * a Worker). test/integration/quota-store.test.ts checks the text equals the files.
 * The bundled host (tools/build/host.ts) has no src/ tree beside it: the build reads the same
 * files and inlines their text as `__EAR_QUOTA_SCRIPTS__`.
 */
import { readFile } from "node:fs/promises";
import { QUOTA_SCRIPT_NAMES, type QuotaScripts } from "../../src/quota/scripts";

declare const __EAR_QUOTA_SCRIPTS__: QuotaScripts | undefined;

export const QUOTA_LUA_DIR = new URL("../../src/quota/lua/", import.meta.url);

export async function loadQuotaScripts(dir: URL = QUOTA_LUA_DIR): Promise<QuotaScripts> {
  if (typeof __EAR_QUOTA_SCRIPTS__ !== "undefined" && dir === QUOTA_LUA_DIR) return __EAR_QUOTA_SCRIPTS__;
  const texts = await Promise.all(QUOTA_SCRIPT_NAMES.map((name) => readFile(new URL(`${name}.lua`, dir), "utf8")));
  const [acquire = "", renew = "", release = "", settle = ""] = texts;
  return { acquire, renew, release, settle };
}
