/**
 * The mock model: an OpenAI-compatible chat-completions server with scripted answers and a
 * concurrency cap (tools/mock-model/). Imported by tests and the dev stack; run alone with
 *
 *   tsx tools/mock-model/main.ts [--host H] [--port N] [--max-concurrency N] [--over-cap reject|admit]
 *                           [--ttft-ms N] [--tokens-per-s N] [--api-key K]
 *                           [--fail-rate F] [--fail-statuses 429,503] [--fail-retry-after-s N]
 *
 * (env: MOCK_MODEL_HOST, MOCK_MODEL_PORT, MOCK_MODEL_MAX_CONCURRENCY, MOCK_MODEL_OVER_CAP,
 * MOCK_MODEL_TTFT_MS, MOCK_MODEL_TOKENS_PER_S, MOCK_MODEL_API_KEY, MOCK_MODEL_FAIL_RATE,
 * MOCK_MODEL_FAIL_STATUSES, MOCK_MODEL_FAIL_RETRY_AFTER_S; flags win). Prints the base
 * URL and stops on SIGINT/SIGTERM.
 */
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { type MockModelOptions, startMockModel } from "./server";

export type { LoggedRequest } from "./request-log";
export type { AnswerPlan } from "./script";
export { splitTokens } from "./script";
export {
  MOCK_MODEL_NAME,
  type MockModel,
  type MockModelOptions,
  type ProviderLedger,
  startMockModel,
} from "./server";
export type { MockStats, OverCapPolicy } from "./slots";

function num(name: string, raw: string | undefined): number | undefined {
  if (raw === undefined || raw === "") return undefined;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number, got "${raw}"`);
  return n;
}

export function cliOptions(argv: string[], env: Record<string, string | undefined>): MockModelOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      host: { type: "string" },
      port: { type: "string" },
      "max-concurrency": { type: "string" },
      "over-cap": { type: "string" },
      "ttft-ms": { type: "string" },
      "tokens-per-s": { type: "string" },
      "api-key": { type: "string" },
      "fail-rate": { type: "string" },
      "fail-statuses": { type: "string" },
      "fail-retry-after-s": { type: "string" },
    },
    strict: true,
  });
  const overCap = values["over-cap"] ?? env.MOCK_MODEL_OVER_CAP;
  if (overCap !== undefined && overCap !== "reject" && overCap !== "admit") {
    throw new Error(`--over-cap must be "reject" or "admit", got "${overCap}"`);
  }
  const failRate = num("--fail-rate", values["fail-rate"] ?? env.MOCK_MODEL_FAIL_RATE);
  if (failRate !== undefined && failRate > 1) throw new Error(`--fail-rate must be between 0 and 1, got ${failRate}`);
  const statuses = (values["fail-statuses"] ?? env.MOCK_MODEL_FAIL_STATUSES)?.split(",").map((s) => s.trim());
  if (statuses?.some((s) => !/^[45]\d\d$/.test(s))) {
    throw new Error(`--fail-statuses must be HTTP error statuses separated by commas, got "${statuses.join(",")}"`);
  }
  return {
    failRate,
    failStatuses: statuses?.map(Number),
    failRetryAfterS: num("--fail-retry-after-s", values["fail-retry-after-s"] ?? env.MOCK_MODEL_FAIL_RETRY_AFTER_S),
    host: values.host ?? env.MOCK_MODEL_HOST ?? "127.0.0.1",
    port: num("--port", values.port ?? env.MOCK_MODEL_PORT) ?? 0,
    maxConcurrency: num("--max-concurrency", values["max-concurrency"] ?? env.MOCK_MODEL_MAX_CONCURRENCY) ?? null,
    overCap,
    defaultTtftMs: num("--ttft-ms", values["ttft-ms"] ?? env.MOCK_MODEL_TTFT_MS),
    defaultTokensPerS: num("--tokens-per-s", values["tokens-per-s"] ?? env.MOCK_MODEL_TOKENS_PER_S),
    apiKey: values["api-key"] ?? env.MOCK_MODEL_API_KEY,
  };
}

async function main(): Promise<void> {
  let options: MockModelOptions;
  try {
    options = cliOptions(process.argv.slice(2), process.env);
  } catch (err) {
    console.error(`mock-model: ${(err as Error).message}`);
    process.exit(2);
  }
  const mock = await startMockModel(options);
  console.log(mock.url);
  const stop = () => {
    mock.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  void main();
}
