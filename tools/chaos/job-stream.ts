/**
 * One job's event stream as a client reads it: SSE through the gateway, which ends the stream at
 * the terminal event. A stream still open after `timeoutMs` counts with what it had; `error`
 * says why it ended early. Both chaos harnesses compare these with the rows.
 */
import { readSse } from "../lib/sse";

export interface JobStreamEvent {
  offset: number;
  type: string;
  executionId: string;
  payload: Record<string, unknown>;
}

export async function readJobStream(
  gateway: { gatewayUrl: string; apiKey: string },
  id: string,
  timeoutMs: number,
): Promise<{ events: JobStreamEvent[]; error: string | null }> {
  const events: JobStreamEvent[] = [];
  try {
    for await (const ev of readSse(`${gateway.gatewayUrl}/v1/jobs/${id}/events`, {
      headers: { authorization: `Bearer ${gateway.apiKey}` },
      signal: AbortSignal.timeout(timeoutMs),
    })) {
      const data = JSON.parse(ev.data) as { execution_id: string; payload: Record<string, unknown> };
      events.push({ offset: Number(ev.id), type: ev.event, executionId: data.execution_id, payload: data.payload });
    }
    return { events, error: null };
  } catch (err) {
    return { events, error: err instanceof Error ? err.message : String(err) };
  }
}
