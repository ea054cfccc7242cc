/**
 * The environment every wrangler invocation of ours runs with. Offline, without these
 * flags wrangler phones home (metrics, error reports, the `cf` object fetch); its config and
 * logs stay inside the project.
 */
import { join } from "node:path";

export function offlineWranglerEnv(root: string): NodeJS.ProcessEnv {
  return {
    ...process.env,
    WRANGLER_SEND_METRICS: "false",
    CLOUDFLARE_CF_FETCH_ENABLED: "false",
    WRANGLER_HIDE_BANNER: "true",
    WRANGLER_SEND_ERROR_REPORTS: "false",
    XDG_CONFIG_HOME: join(root, ".wrangler", "config"),
    WRANGLER_LOG_PATH: join(root, ".wrangler", "logs"),
  };
}
