/**
 * An ingest stub that acks every batch the way the gateway's projector does (contiguous seqs per
 * execution), for host tests and benches where event delivery is not what is measured.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { EventEnvelope, IngestBatch } from "../../../src/contracts/events";

export interface AckingIngest {
  url: string;
  /** Every event acknowledged (first delivery only), in arrival order. */
  events: EventEnvelope[];
  close(): Promise<void>;
}

/**
 * `onEvent` sees each event once, at its first delivery, with its batch's job id; `onRequest`
 * each ingest request (a host's whole flush).
 */
export async function startAckingIngest(
  opts: { onEvent?: (event: EventEnvelope, jobId: string) => void; onRequest?: () => void } = {},
): Promise<AckingIngest> {
  const acked = new Map<string, number>();
  const events: EventEnvelope[] = [];
  const server: Server = createServer(async (req, res) => {
    // Only the ingest: a host's other gateway calls (a workspace snapshot's blob upload) are
    // refused at once, which the host takes as a snapshot not stored, never as a stalled run.
    if (req.method !== "POST" || !req.url?.startsWith("/internal/events")) {
      req.resume();
      res.writeHead(404, { "content-type": "application/json" }).end('{"error":{"code":"not_found"}}');
      return;
    }
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    opts.onRequest?.();
    // A host sends its whole flush as `{batches}`; each job's batch is answered apiece.
    const { batches } = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { batches: IngestBatch[] };
    const results = batches.map((batch) => {
      let seq = 0;
      for (const e of batch.events) {
        const have = acked.get(e.execution_id) ?? 0;
        if (e.seq === have + 1) {
          acked.set(e.execution_id, e.seq);
          events.push(e);
          opts.onEvent?.(e, batch.job_id);
        }
        seq = acked.get(e.execution_id) ?? 0;
      }
      return {
        job_id: batch.job_id,
        status: 200,
        ack: { acked_seq: seq, accepted: batch.events.length, duplicates: 0 },
      };
    });
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ results }));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    events,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
