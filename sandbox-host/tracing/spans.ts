/**
 * The spans of a run, made at the runner's existing seams (the execution, each model call, the
 * quota wait, sandbox creation, each tool call, each delegate call). With tracing off the
 * tracer is the API's no-op one: every helper here runs its work with a non-recording span and
 * nothing else. Attribute names: OpenTelemetry's GenAI semantic conventions (`gen_ai.*`) where
 * they name the thing, `ear.*` (this runtime) otherwise.
 */
import {
  type Attributes,
  type Context,
  context,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from "@opentelemetry/api";
import { formatTraceparent, jobTraceId, parseTraceparent } from "../../src/domain/traceparent";
import type { HostTracing } from "./tracing";

/** Run `work` in a child span of the active one; a throw is recorded on the span and rethrown. */
export async function inSpan<T>(
  tracer: Tracer,
  name: string,
  opts: { attributes?: Attributes; kind?: SpanKind },
  work: (span: Span) => Promise<T>,
): Promise<T> {
  return tracer.startActiveSpan(
    name,
    { attributes: opts.attributes, kind: opts.kind ?? SpanKind.INTERNAL },
    async (span) => {
      try {
        return await work(span);
      } catch (err) {
        span.recordException(err instanceof Error ? err : String(err));
        span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
        throw err;
      } finally {
        span.end();
      }
    },
  );
}

/** What ended a step, on its span: `ear.outcome`, and an error status for a failure. */
export function markOutcome(span: Span, outcome: string, error?: { code: string; message: string } | null): void {
  span.setAttribute("ear.outcome", outcome);
  if (error) {
    span.setAttribute("error.type", error.code);
    span.setStatus({ code: SpanStatusCode.ERROR, message: error.message });
  }
}

/**
 * The execution's span: a child of the job's kept traceparent (the delegating call's for a child
 * job, or a client's the operator trusts), else the root of the trace named after the job
 * (`jobTraceId`), which the host's own sampler samples. A client's traceparent kept as a link
 * (`clientTraceparent`, the default) is a span link on it: the client's trace can find the run,
 * and the client decides neither the run's trace id nor whether it is recorded. Every span
 * `work` makes is under it.
 */
export async function inExecutionSpan<T>(
  tracing: HostTracing,
  run: {
    jobId: string;
    executionId: string;
    tenantId: string;
    epoch: number;
    traceparent: string | null;
    clientTraceparent?: string | null;
  },
  work: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = parseTraceparent(run.traceparent);
  const parentContext = parent
    ? trace.setSpanContext(ROOT_CONTEXT, {
        traceId: parent.traceId,
        spanId: parent.spanId,
        traceFlags: parent.flags,
        isRemote: true,
      })
    : ROOT_CONTEXT;
  if (!parent) tracing.nameNextTrace(jobTraceId(run.jobId, null));
  const client = parseTraceparent(run.clientTraceparent);
  const span = tracing.tracer.startSpan(
    "execution",
    {
      kind: SpanKind.CONSUMER,
      // Links are given at the start, so the sampler sees them (and ignores their flags).
      links: client
        ? [
            {
              context: { traceId: client.traceId, spanId: client.spanId, traceFlags: client.flags, isRemote: true },
              attributes: { "ear.link": "client" },
            },
          ]
        : [],
      attributes: {
        "ear.job.id": run.jobId,
        "ear.execution.id": run.executionId,
        "ear.tenant.id": run.tenantId,
        "ear.epoch": run.epoch,
      },
    },
    parentContext,
  );
  tracing.nameNextTrace(null);
  try {
    return await context.with(trace.setSpan(parentContext, span), () => work(span));
  } catch (err) {
    span.recordException(err instanceof Error ? err : String(err));
    span.setStatus({ code: SpanStatusCode.ERROR });
    throw err;
  } finally {
    span.end();
  }
}

/** The active span as a W3C traceparent (for an MCP request, a child job), or null when none records. */
export function activeTraceparent(ctx: Context = context.active()): string | null {
  const sc = trace.getSpanContext(ctx);
  if (!sc || !trace.isSpanContextValid(sc)) return null;
  return formatTraceparent({ traceId: sc.traceId, spanId: sc.spanId, flags: sc.traceFlags });
}
