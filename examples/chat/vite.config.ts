/**
 * The example's Vite config: React pages, and the dev and preview servers answer `/api/token`
 * with token.ts (the team's server, here inside Vite). The gateway and key come from EAR_URL and
 * EAR_API_KEY, else from the running `npm run dev` stack's .dev/stack.json.
 */
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { resolve } from "node:path";
import { defineConfig, type Plugin } from "vite";
import { handleTokenRequest, type TokenServerEnv } from "./token";

function serverEnv(): TokenServerEnv {
  if (process.env.EAR_URL && process.env.EAR_API_KEY)
    return { gatewayUrl: process.env.EAR_URL, apiKey: process.env.EAR_API_KEY };
  const file = resolve(import.meta.dirname, "../../.dev/stack.json");
  try {
    const stack = JSON.parse(readFileSync(file, "utf8")) as { gateway_url: string; api_key: string };
    return { gatewayUrl: stack.gateway_url, apiKey: stack.api_key };
  } catch {
    throw new Error(`no EAR_URL/EAR_API_KEY and no ${file}: start the stack first (npm run dev)`);
  }
}

/** Node's request to token.ts's Web Request and back. */
export async function serveToken(req: IncomingMessage, res: ServerResponse, env: TokenServerEnv): Promise<void> {
  try {
    const answer = await handleTokenRequest(new Request(`http://page${req.url ?? "/"}`), env);
    res.writeHead(answer.status, Object.fromEntries(answer.headers));
    res.end(await answer.text());
  } catch (err) {
    res.writeHead(502, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: String(err) }));
  }
}

const tokenRoute = (): Plugin => ({
  name: "ear-token-route",
  configureServer(server) {
    server.middlewares.use("/api/token", (req, res) => void serveToken(req, res, serverEnv()));
  },
  configurePreviewServer(server) {
    server.middlewares.use("/api/token", (req, res) => void serveToken(req, res, serverEnv()));
  },
});

export default defineConfig({
  root: import.meta.dirname,
  plugins: [tokenRoute()],
  server: { port: 5173, strictPort: true },
  build: {
    rolldownOptions: {
      // swr (under @ai-sdk/react) marks its modules "use client", a directive for React Server
      // Components bundlers; a page bundle has no server components, so the note is noise.
      onwarn(warning, warn) {
        if (warning.code !== "MODULE_LEVEL_DIRECTIVE") warn(warning);
      },
    },
  },
});
