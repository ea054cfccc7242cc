/**
 * Free loopback ports for the services we start. A port is picked at random *below* the kernel's
 * ephemeral range and checked by binding it, then released for the service to bind.
 *
 * Why not `listen(0)`: the kernel hands out a listen(0) port from the same ephemeral range it
 * takes the local port of every outgoing connection from, so between our release and the
 * service's bind (a gateway binds seconds later, after the console build and the bundle) any
 * connect() on the machine could take it. Seen in CI: `npm run dev` failed "Address already in
 * use" on a port freePort had just given, while 60 other tests held Postgres and HTTP
 * connections. Ports below the range are never taken by a connect(), only by a listener.
 */
import { readFile } from "node:fs/promises";
import { createServer } from "node:net";
import { sleep } from "../../../src/domain/async";

/** Given out by this process: not given again (two services of one stack must not share one). */
const given = new Set<number>();
let range: Promise<[number, number]> | undefined;

/** [low, high) below the ephemeral range (Linux: /proc/sys/net/ipv4/ip_local_port_range). */
async function pickRange(): Promise<[number, number]> {
  const ephemeralLow = await readFile("/proc/sys/net/ipv4/ip_local_port_range", "utf8")
    .then((t) => Number(t.trim().split(/\s+/)[0]))
    .catch(() => Number.NaN);
  // Room for 10,000+ ports under the range; where it starts too low to leave that, the top end.
  if (Number.isInteger(ephemeralLow) && ephemeralLow > 12_000) return [10_000, ephemeralLow];
  return [61_000, 65_535];
}

function tryBind(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once("error", () => resolve(false));
    srv.listen({ port, host, exclusive: true }, () => srv.close(() => resolve(true)));
  });
}

export async function freePort(host = "127.0.0.1"): Promise<number> {
  range ??= pickRange();
  const [low, high] = await range;
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low));
    if (given.has(port)) continue;
    if (await tryBind(port, host)) {
      given.add(port);
      return port;
    }
  }
  throw new Error(`no free port on ${host} in ${low}-${high - 1} after 200 tries`);
}

export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined | null | false>,
  { timeoutMs = 20_000, intervalMs = 50 } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await probe();
      if (v) return v;
    } catch (err) {
      lastError = err;
    }
    await sleep(intervalMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${String(lastError)}` : ""}`);
}
