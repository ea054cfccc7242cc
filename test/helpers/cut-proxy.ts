/**
 * A TCP proxy in front of a local port whose open connections can be cut at once, as a network
 * failure would cut them (a reset, not a close handshake the peer could tell apart), while new
 * connections keep getting through: what a client's reconnect logic has to survive.
 */
import { connect, createServer, type Socket } from "node:net";

export interface CutProxy {
  url: string;
  /** Resets every connection open now; returns how many there were. */
  cutAll(): number;
  close(): Promise<void>;
}

export async function startCutProxy(targetPort: number): Promise<CutProxy> {
  const open = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(targetPort, "127.0.0.1");
    for (const s of [client, upstream]) {
      open.add(s);
      s.on("close", () => open.delete(s));
      s.on("error", () => {});
    }
    client.pipe(upstream).pipe(client);
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    cutAll: () => {
      const n = open.size;
      for (const s of open) s.resetAndDestroy();
      return n;
    },
    close: async () => {
      for (const s of open) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
