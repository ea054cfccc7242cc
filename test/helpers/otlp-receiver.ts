/**
 * An OTLP/HTTP trace receiver of the tests' own: a loopback node:http server taking
 * `POST /v1/traces`. `http/json` bodies are decoded into spans (ids as the hex strings OTLP/JSON
 * uses, attributes flattened to plain values); `http/protobuf` bodies are kept raw with their
 * content type, for a test to find a trace id's 16 bytes in (no protobuf decoder is pulled in
 * for that).
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  /** The resource's attributes (service.name, service.instance.id, …). */
  resource: Record<string, unknown>;
  status: { code?: number; message?: string };
  /** The span's links: another span's context, with the link's own attributes. */
  links: Array<{ traceId: string; spanId: string; attributes: Record<string, unknown> }>;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
}

export interface OtlpReceiver {
  /** The base URL, for OTEL_EXPORTER_OTLP_ENDPOINT (the exporter appends /v1/traces). */
  url: string;
  spans: ReceivedSpan[];
  /** Every request: its path, content type and raw body. */
  requests: Array<{ path: string; contentType: string; body: Buffer }>;
  close(): Promise<void>;
}

type AnyValue = {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: AnyValue[] };
};
type KeyValue = { key: string; value: AnyValue };

function plain(v: AnyValue): unknown {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(plain);
  return undefined;
}

const attrs = (list: KeyValue[] | undefined) => Object.fromEntries((list ?? []).map((kv) => [kv.key, plain(kv.value)]));

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const requests: OtlpReceiver["requests"] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const contentType = String(req.headers["content-type"] ?? "");
      requests.push({ path: req.url ?? "", contentType, body });
      if (req.method === "POST" && req.url === "/v1/traces" && contentType.startsWith("application/json")) {
        const doc = JSON.parse(body.toString("utf8")) as {
          resourceSpans?: Array<{
            resource?: { attributes?: KeyValue[] };
            scopeSpans?: Array<{ spans?: Array<Record<string, unknown>> }>;
          }>;
        };
        for (const rs of doc.resourceSpans ?? []) {
          const resource = attrs(rs.resource?.attributes);
          for (const ss of rs.scopeSpans ?? []) {
            for (const s of ss.spans ?? []) {
              spans.push({
                traceId: String(s.traceId),
                spanId: String(s.spanId),
                parentSpanId: String(s.parentSpanId ?? ""),
                name: String(s.name),
                kind: Number(s.kind),
                attributes: attrs(s.attributes as KeyValue[] | undefined),
                resource,
                status: (s.status ?? {}) as ReceivedSpan["status"],
                links: ((s.links ?? []) as Array<{ traceId: unknown; spanId: unknown; attributes?: KeyValue[] }>).map(
                  (l) => ({ traceId: String(l.traceId), spanId: String(l.spanId), attributes: attrs(l.attributes) }),
                ),
                startTimeUnixNano: String(s.startTimeUnixNano),
                endTimeUnixNano: String(s.endTimeUnixNano),
              });
            }
          }
        }
      }
      res
        .writeHead(200, { "content-type": contentType || "application/json" })
        .end(contentType.startsWith("application/json") ? "{}" : "");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
