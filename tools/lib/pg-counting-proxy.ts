/**
 * A TCP proxy to Postgres that counts what its clients send, on the wire: statements (simple-query
 * `Q` and extended-protocol `Execute` messages) and round trips (`Q` and `Sync`), and statements by
 * the start of their text. Benches put it between sandbox-hosts and Postgres to count what runs
 * cost in database work without instrumenting the host.
 */
import type { AddressInfo } from "node:net";
import { connect, createServer as createTcpServer, type Socket, type Server as TcpServer } from "node:net";

/** Listen on a free loopback port and forward to `target`, counting as above. */
export async function countingPgProxy(target: { host: string; port: number }) {
  const counts = { statements: 0, trips: 0 };
  /** Statements by their text's start (Parse and simple Query messages carry the SQL). */
  const byText = new Map<string, number>();
  const note = (sql: string) => {
    const key = sql.replace(/\s+/g, " ").trim().slice(0, 60);
    byText.set(key, (byText.get(key) ?? 0) + 1);
  };
  const server: TcpServer = createTcpServer((client: Socket) => {
    const upstream = connect(target.port, target.host);
    let buf = Buffer.alloc(0);
    let started = false;
    client.on("data", (chunk: Buffer) => {
      upstream.write(chunk);
      buf = Buffer.concat([buf, chunk]);
      // The startup message has no type byte; every later frontend message is type + int32 length.
      if (!started) {
        if (buf.length < 4) return;
        const len = buf.readInt32BE(0);
        if (buf.length < len) return;
        buf = buf.subarray(len);
        started = true;
      }
      while (buf.length >= 5) {
        const len = buf.readInt32BE(1);
        if (buf.length < 1 + len) break;
        const type = String.fromCharCode(buf[0] as number);
        if (type === "Q") {
          counts.statements++;
          counts.trips++;
          note(buf.toString("utf8", 5, 1 + len - 1));
        } else if (type === "P") {
          // Parse: statement name, NUL, the SQL, NUL, …
          const nameEnd = buf.indexOf(0, 5);
          note(buf.toString("utf8", nameEnd + 1, buf.indexOf(0, nameEnd + 1)));
        } else if (type === "E") counts.statements++;
        else if (type === "S") counts.trips++;
        buf = buf.subarray(1 + len);
      }
    });
    upstream.on("data", (c) => client.write(c));
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end);
    upstream.on("error", end);
    client.on("close", end);
    upstream.on("close", end);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { port: (server.address() as AddressInfo).port, counts, byText, close: () => server.close() };
}
