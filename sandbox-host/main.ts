/**
 * The sandbox-host process: the only place that reads process.env. Parses the configuration
 * once, starts the host, prints one `host.ready` JSON line on stdout (the dev orchestrator
 * waits for it), and on SIGTERM/SIGINT stops claiming, lets running jobs finish within the
 * grace period, flushes the outbox and exits. A second signal exits at once.
 */
import { HostConfigError, hostConfigFromEnv } from "./config";
import { startHost } from "./host";
import { createLogger, errorFields } from "./log";
import { ModelConfigError, modelCatalogFromEnv, modelConfigFromEnv } from "./model/config";
import { createOpenAICompatibleClient } from "./model/openai-compatible";

async function main(): Promise<void> {
  const env = { ...process.env };
  let config: ReturnType<typeof hostConfigFromEnv>;
  let modelConfig: ReturnType<typeof modelConfigFromEnv>;
  let models: ReturnType<typeof modelCatalogFromEnv>;
  try {
    config = hostConfigFromEnv(env);
    modelConfig = modelConfigFromEnv(env);
    models = modelCatalogFromEnv(env);
  } catch (err) {
    if (err instanceof HostConfigError || err instanceof ModelConfigError) {
      process.stderr.write(`sandbox-host: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }

  const log = createLogger({ host: config.hostId });
  const host = await startHost(config, {
    model: createOpenAICompatibleClient(modelConfig),
    models,
    log,
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
