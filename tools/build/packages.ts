/**
 * The package's client entry points as ESM plus declarations, into dist/pkg (package.json
 * `exports`): `edge-agent-runtime/ai-sdk` (the useChat transport), `edge-agent-runtime/react`
 * (the run hooks), `edge-agent-runtime/tools` (`defineTool`, for the hosts' HOST_TOOLS modules)
 * and `edge-agent-runtime/agents` (`defineAgent`, for `npm run cli -- agents deploy`). Built, not source exports, because Node cannot load our extensionless
 * TypeScript imports and a consumer's bundler should not have to compile them either.
 *
 *   dist/pkg/ai-sdk.js, react.js, tools.js, agents.js  esbuild, shared code in chunks
 *   dist/pkg/types/…                        tsc declarations (tools/build/packages.tsconfig.json)
 *
 * npm packages stay external: `ai` and `react` are the consumer's (peer dependencies), so the
 * page has one React and one AI SDK; the client's own runtime dependency (eventsource-parser)
 * comes from this package's dependencies. `npm run build` runs it with the host and console builds.
 */
import { spawn } from "node:child_process";
import { rm } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const PKG_OUT = join(ROOT, "dist", "pkg");

export async function buildPackages(): Promise<void> {
  await rm(PKG_OUT, { recursive: true, force: true });
  await build({
    absWorkingDir: ROOT,
    entryPoints: {
      "ai-sdk": "src/ai-sdk/transport.ts",
      react: "src/react/hooks.ts",
      tools: "src/code-tools/define-tool.ts",
      agents: "src/code-tools/define-agent.ts",
    },
    outdir: PKG_OUT,
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "neutral",
    // Browsers of the last years and Node ≥ 20 (package.json engines).
    target: "es2022",
    packages: "external",
    sourcemap: "linked",
    logLevel: "warning",
  });
  await new Promise<void>((ok, fail) => {
    const tsc = spawn(
      join(ROOT, "node_modules", ".bin", "tsc"),
      ["-p", join(ROOT, "tools", "build", "packages.tsconfig.json")],
      {
        stdio: "inherit",
      },
    );
    tsc.once("error", fail);
    tsc.once("exit", (code) => (code === 0 ? ok() : fail(new Error(`tsc (declarations) exited ${code}`))));
  });
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await buildPackages();
  console.log(`packages: ${PKG_OUT}`);
}
