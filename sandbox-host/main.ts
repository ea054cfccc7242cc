/**
 * The sandbox-host process: the only place that reads process.env. Parses the configuration
 * once, starts the host, prints one `host.ready` JSON line on stdout (the dev orchestrator
 * waits for it), and on SIGTERM/SIGINT stops claiming, lets running jobs finish within the
 * grace period, flushes the outbox and exits. A second signal exits at once.
 */
import { readFileSync } from "node:fs";
import { CodeToolsError, describeTool, loadToolModules, toolModuleSpecifiers } from "./code-tools/tool-modules";
import { startHost } from "./host";
import { HostConfigError, hostConfigFromEnv } from "./host-config";
import { createLogger, errorFields } from "./log";
import { McpConfigError, type McpHostConfig, mcpConfigFromEnv } from "./mcp/mcp-config";
import { type HostModels, hostModelsFromEnv, ModelConfigError } from "./model/provider-config";
import { createModelRouter } from "./model/router";
import { type HostTracing, startTracing, TracingConfigError } from "./tracing/tracing";

/**
 * The text of the file an env variable names, read once here at startup (never again: a host's
 * models and MCP secrets are fixed for its life); undefined when the variable is unset.
 */
function configFileText(
  env: Record<string, string | undefined>,
  name: "MODEL_REGISTRY_FILE" | "MCP_SECRETS_FILE",
  fail: (message: string) => Error,
): string | undefined {
  const path = env[name]?.trim();
  if (!path) return undefined;
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    throw fail(`${name} (${path}) cannot be read: ${err instanceof Error ? err.message : String(err)}`);
  }
}

async function main(): Promise<void> {
  const env = { ...process.env };
  let config: ReturnType<typeof hostConfigFromEnv>;
  let models: HostModels;
  let mcp: McpHostConfig;
  let tracing: HostTracing;
  try {
    config = hostConfigFromEnv(env);
    models = hostModelsFromEnv(
      env,
      configFileText(env, "MODEL_REGISTRY_FILE", (m) => new ModelConfigError(`invalid model configuration: ${m}`)),
    );
    mcp = mcpConfigFromEnv(
      env,
      configFileText(env, "MCP_SECRETS_FILE", (m) => new McpConfigError(`invalid MCP configuration: ${m}`)),
    );
    tracing = await startTracing(env, config.hostId);
  } catch (err) {
    if (
      err instanceof HostConfigError ||
      err instanceof ModelConfigError ||
      err instanceof McpConfigError ||
      err instanceof TracingConfigError
    ) {
      process.stderr.write(`sandbox-host: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  // HOST_TOOLS, once: the modules load here (their top-level code runs on this thread, at
  // startup only) to find and describe the tools; every call runs on a tool thread.
  let codeTools: { modules: string[]; specs: ReturnType<typeof describeTool>[] };
  try {
    const modules = toolModuleSpecifiers(config.toolModules, process.cwd());
    const loaded = await loadToolModules(modules);
    codeTools = { modules, specs: [...loaded.values()].map(describeTool) };
  } catch (err) {
    if (err instanceof CodeToolsError) {
      process.stderr.write(`sandbox-host: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }

  const log = createLogger({ host: config.hostId });
  const host = await startHost(config, {
    model: createModelRouter(models),
    models: models.catalog,
    mcp,
    codeTools,
    log,
    tracing,
  });
  process.stdout.write(`${JSON.stringify({ event: "host.ready", id: host.id, metrics_url: host.metricsUrl })}\n`);

  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals++;
    if (signals > 1) {
      log.warn("second signal; exiting without waiting", { signal });
      process.exit(1);
    }
    log.info("shutting down", { signal });
    host.close().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error("shutdown failed", errorFields(err));
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
}

main().catch((err: unknown) => {
  process.stderr.write(`sandbox-host: failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
