/**
 * The page's dev server sends /api to the backend (`npm run backend`, port 8788), as the team's
 * production routing would; `vite build` writes the static page to dist/.
 */
import { defineConfig } from "vite";

export default defineConfig({
  server: { proxy: { "/api": `http://127.0.0.1:${process.env.BACKEND_PORT ?? 8788}` } },
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
