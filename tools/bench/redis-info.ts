/** INFO <section> from a redis-server over a raw RESP connection (no client library needed). */
import { createConnection } from "node:net";

export function redisInfo(port: number, section: string, host = "127.0.0.1"): Promise<Record<string, string>> {
  return new Promise((resolve, reject) => {
    const sock = createConnection({ port, host });
    let buf = "";
    sock.on("connect", () => sock.write(`INFO ${section}\r\n`));
    sock.on("data", (d) => {
      buf += d.toString();
      const m = /^\$(\d+)\r\n/.exec(buf);
      if (m && buf.length >= m[0].length + Number(m[1])) {
        sock.destroy();
        const out: Record<string, string> = {};
        for (const line of buf.slice(m[0].length).split("\r\n")) {
          const i = line.indexOf(":");
          if (i > 0) out[line.slice(0, i)] = line.slice(i + 1);
        }
        resolve(out);
      }
    });
    sock.on("error", reject);
  });
}
