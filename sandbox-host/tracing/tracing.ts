/**
 * The host's OpenTelemetry traces, configured by the standard variables and built once at
 * startup (main.ts passes its environment; nothing here reads process.env, but the OTLP
 * exporters read their own OTEL_EXPORTER_OTLP_* variables, as every OpenTelemetry SDK does).
 *
 * Off unless an OTLP endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT` or
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and off when `OTEL_SDK_DISABLED=true` or
 * `OTEL_TRACES_EXPORTER=none`. Off costs nothing measurable: the SDK is never imported, no
 * context manager is installed, and the runner's spans are the API's no-op spans.
 *
 * On: a tracer provider with a batch span processor exporting over OTLP/HTTP in
 * `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the
 * specification's default, or `http/json`; `grpc` is refused at startup), the sampler of
 * `OTEL_TRACES_SAMPLER` (+ `_ARG`), the resource from `OTEL_SERVICE_NAME` (default
 * `sandbox-host`) and `OTEL_RESOURCE_ATTRIBUTES`, the batch delay of `OTEL_BSP_SCHEDULE_DELAY`
 * (default 5 s), plus `service.instance.id` = the host id, and
 * an AsyncLocalStorage context manager so that nested steps parent their spans without passing
 * a context around.
 */
import { context, type Tracer, trace } from "@opentelemetry/api";

/** The variables read here (the exporters also read the rest of OTEL_EXPORTER_OTLP_*). */
export const TRACING_ENV_NAMES: readonly string[] = [
  "OTEL_SDK_DISABLED",
  "OTEL_TRACES_EXPORTER",
  "OTEL_EXPORTER_OTLP_ENDPOINT",
  "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
  "OTEL_EXPORTER_OTLP_PROTOCOL",
  "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
  "OTEL_SERVICE_NAME",
  "OTEL_RESOURCE_ATTRIBUTES",
  "OTEL_TRACES_SAMPLER",
  "OTEL_TRACES_SAMPLER_ARG",
  "OTEL_BSP_SCHEDULE_DELAY",
];

/** The instrumentation scope of every span the host makes. */
export const TRACER_NAME = "edge-agent-runtime/sandbox-host";

export interface HostTracing {
  readonly enabled: boolean;
  readonly tracer: Tracer;
  /**
   * Start the root span of a job without a traceparent under the trace id named after the job
   * (`jobTraceId`, src/domain/traceparent.ts): the next root span's trace id. A no-op when off.
   */
  nameNextTrace(traceId: string | null): void;
  /** Export what is buffered and stop (host shutdown). */
  shutdown(): Promise<void>;
}

export class TracingConfigError extends Error {
  override name = "TracingConfigError";
}

export const TRACING_OFF: HostTracing = {
  enabled: false,
  tracer: trace.getTracer(TRACER_NAME),
  nameNextTrace: () => {},
  shutdown: async () => {},
};

/** The tracing the environment asks for (throws TracingConfigError for a value it cannot honour). */
export async function startTracing(env: Record<string, string | undefined>, hostId: string): Promise<HostTracing> {
  const v = (name: string) => {
    const value = env[name]?.trim();
    return value === undefined || value === "" ? undefined : value;
  };
  const endpoint = v("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") ?? v("OTEL_EXPORTER_OTLP_ENDPOINT");
  if (v("OTEL_SDK_DISABLED")?.toLowerCase() === "true" || v("OTEL_TRACES_EXPORTER") === "none" || !endpoint) {
    return TRACING_OFF;
  }
  const exporterName = v("OTEL_TRACES_EXPORTER") ?? "otlp";
  if (exporterName !== "otlp") {
    throw new TracingConfigError(`OTEL_TRACES_EXPORTER: "${exporterName}" is not supported (otlp or none)`);
  }
  const protocol = v("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") ?? v("OTEL_EXPORTER_OTLP_PROTOCOL") ?? "http/protobuf";
  if (protocol !== "http/protobuf" && protocol !== "http/json") {
    throw new TracingConfigError(
      `OTEL_EXPORTER_OTLP_PROTOCOL: "${protocol}" is not supported (http/protobuf or http/json; no gRPC on hosts)`,
    );
  }
  // Loaded only when on, so an untraced host never pays for the SDK's modules.
  const [sdk, resources, asyncHooks, exporterModule] = await Promise.all([
    import("@opentelemetry/sdk-trace"),
    import("@opentelemetry/resources"),
    import("@opentelemetry/context-async-hooks"),
    protocol === "http/json"
      ? import("@opentelemetry/exporter-trace-otlp-http")
      : import("@opentelemetry/exporter-trace-otlp-proto"),
  ]);
  const delay = v("OTEL_BSP_SCHEDULE_DELAY");
  const scheduleDelayMs = delay === undefined ? undefined : Number(delay);
  if (scheduleDelayMs !== undefined && !(Number.isInteger(scheduleDelayMs) && scheduleDelayMs > 0)) {
    throw new TracingConfigError(`OTEL_BSP_SCHEDULE_DELAY: "${delay}" is not a positive number of milliseconds`);
  }
  const sampler = samplerFromEnv(sdk, v("OTEL_TRACES_SAMPLER"), v("OTEL_TRACES_SAMPLER_ARG"));
  const ids = new JobTraceIds(new sdk.RandomIdGenerator());
  const resource = resources
    .resourceFromAttributes({ "service.name": v("OTEL_SERVICE_NAME") ?? "sandbox-host", "service.instance.id": hostId })
    .merge(resources.resourceFromAttributes(parseResourceAttributes(v("OTEL_RESOURCE_ATTRIBUTES"))));
  const provider = new sdk.TracerProvider({
    resource,
    sampler,
    idGenerator: ids,
    spanProcessors: [
      new sdk.BatchSpanProcessor({
        exporter: new exporterModule.OTLPTraceExporter(),
        ...(scheduleDelayMs === undefined ? {} : { scheduledDelayMillis: scheduleDelayMs }),
      }),
    ],
  });
  context.setGlobalContextManager(new asyncHooks.AsyncLocalStorageContextManager().enable());
  return {
    enabled: true,
    tracer: provider.getTracer(TRACER_NAME),
    nameNextTrace: (traceId) => {
      ids.next = traceId;
    },
    shutdown: async () => {
      await provider.shutdown();
      context.disable();
    },
  };
}

type Sdk = typeof import("@opentelemetry/sdk-trace");

/** `OTEL_TRACES_SAMPLER` as the specification names them (default parentbased_always_on). */
function samplerFromEnv(sdk: Sdk, name: string | undefined, arg: string | undefined) {
  const ratio = () => {
    const r = arg === undefined ? 1 : Number(arg);
    if (!Number.isFinite(r) || r < 0 || r > 1) {
      throw new TracingConfigError(`OTEL_TRACES_SAMPLER_ARG: "${arg}" is not a ratio between 0 and 1`);
    }
    return new sdk.TraceIdRatioBasedSampler(r);
  };
  switch (name ?? "parentbased_always_on") {
    case "always_on":
      return new sdk.AlwaysOnSampler();
    case "always_off":
      return new sdk.AlwaysOffSampler();
    case "traceidratio":
      return ratio();
    case "parentbased_always_on":
      return new sdk.ParentBasedSampler({ root: new sdk.AlwaysOnSampler() });
    case "parentbased_always_off":
      return new sdk.ParentBasedSampler({ root: new sdk.AlwaysOffSampler() });
    case "parentbased_traceidratio":
      return new sdk.ParentBasedSampler({ root: ratio() });
    default:
      throw new TracingConfigError(
        `OTEL_TRACES_SAMPLER: "${name}" is not supported (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)`,
      );
  }
}

/** `key1=value1,key2=value2` (values percent-decoded), as the specification writes it. */
function parseResourceAttributes(raw: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of raw?.split(",") ?? []) {
    const eq = pair.indexOf("=");
    if (eq <= 0) continue;
    try {
      out[pair.slice(0, eq).trim()] = decodeURIComponent(pair.slice(eq + 1).trim());
    } catch {
      // A malformed escape: the attribute is dropped, as the SDK's own detector does.
    }
  }
  return out;
}

/**
 * Random ids, except the next root span's trace id when a run asked for it (nameNextTrace, set
 * and used in the same synchronous startSpan call, so runs cannot take each other's).
 */
class JobTraceIds {
  next: string | null = null;
  constructor(private readonly random: { generateTraceId(): string; generateSpanId(): string }) {}
  generateTraceId(): string {
    const named = this.next;
    this.next = null;
    return named ?? this.random.generateTraceId();
  }
  generateSpanId(): string {
    return this.random.generateSpanId();
  }
}
