/**
 * W3C Trace Context `traceparent` (https://www.w3.org/TR/trace-context/#traceparent-header):
 * `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lower case, neither id all zeros. The
 * gateway keeps a valid one with the job (an invalid one is ignored, as the spec says a receiver
 * does): a client's as a link unless the operator trusts clients (`clientTraceContext`), a
 * delegating call's as the parent; hosts parent the run's spans on the parent and link the link.
 */

const TRACEPARENT_RE = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

export interface TraceParent {
  traceId: string;
  spanId: string;
  /** The flags byte; bit 0 = sampled. */
  flags: number;
}

/** The parsed header, or null when it is absent or not a valid version-00 traceparent. */
export function parseTraceparent(raw: string | null | undefined): TraceParent | null {
  if (!raw) return null;
  const m = TRACEPARENT_RE.exec(raw.trim());
  if (!m) return null;
  const [, version, traceId, spanId, flags] = m as unknown as [string, string, string, string, string];
  // Version ff is invalid; a later version is read as 00 only when it has 00's exact shape.
  if (version === "ff" || /^0+$/.test(traceId) || /^0+$/.test(spanId)) return null;
  return { traceId, spanId, flags: Number.parseInt(flags, 16) };
}

/**
 * What a job keeps of the traceparent a client sent: by default only a link (`link`), so the
 * run's trace is the operator's, named after the job and sampled by the hosts' own sampler; a
 * client's flag 00 cannot hide a run from the operator's traces, nor can it pick the run's trace
 * id. With the operator's opt-in (`trust`, OTEL_TRUST_CLIENT_SAMPLING) it is the run's parent
 * (`traceparent`), as W3C propagation does between services of one owner. Either one, formatted,
 * or neither for an absent or invalid header.
 */
export function clientTraceContext(
  raw: string | null | undefined,
  trust: boolean,
): { traceparent: string | null; link: string | null } {
  const parsed = parseTraceparent(raw);
  const kept = parsed ? formatTraceparent(parsed) : null;
  return trust ? { traceparent: kept, link: null } : { traceparent: null, link: kept };
}

export function formatTraceparent(tp: TraceParent): string {
  return `00-${tp.traceId}-${tp.spanId}-${(tp.flags & 0xff).toString(16).padStart(2, "0")}`;
}

/**
 * The trace a job's run belongs to: the kept parent traceparent's, else one named after the job (its
 * UUID's 32 hex digits; hosts start such a run's root span with exactly that id), so a job's
 * trace can be found from its id alone.
 */
export function jobTraceId(jobId: string, traceparent: string | null): string {
  return parseTraceparent(traceparent)?.traceId ?? jobId.replaceAll("-", "").toLowerCase();
}
