/**
 * What `npm run dev` allows that a deployment does not, unless the developer set the variable
 * (their value is used as given): a webhook receiver, an MCP server and a page (Vite, Next…) on
 * this machine, on whatever port they got. Without them a first webhook or browser call was
 * refused until the stack was restarted with the right list. Set by tools/stack/dev.ts only, and
 * printed there as dev-only: nothing in the gateway's or the hosts' own defaults changes (with
 * these unset, webhooks and MCP are off and no origin may call the API).
 */
export const DEV_ONLY_DEFAULTS = {
  WEBHOOK_ALLOWED_URLS: "http://127.0.0.1:*,http://localhost:*",
  MCP_ALLOWED_URLS: "http://127.0.0.1:*,http://localhost:*",
  CORS_ALLOWED_ORIGINS: "http://localhost:*,http://127.0.0.1:*",
} as const;

/** The dev-only defaults `env` does not set itself. */
export function devOnlyDefaults(
  env: Record<string, string | undefined>,
): Partial<Record<keyof typeof DEV_ONLY_DEFAULTS, string>> {
  return Object.fromEntries(Object.entries(DEV_ONLY_DEFAULTS).filter(([name]) => (env[name] ?? "").trim() === ""));
}
