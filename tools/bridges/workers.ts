/**
 * `--workers N` for a bridge's CLI: N processes serving one port through node:cluster (the
 * primary accepts each connection and hands it to a worker; with keep-alive clients that is one
 * hand-over per connection, not per request). Each worker is a whole bridge with its own pool or
 * Redis connection. The primary prints the one ready line once every worker listens, replaces a
 * worker that dies, and on SIGINT/SIGTERM stops them all and exits when they have.
 *
 * With N = 1 (the default) there is no primary: the bridge is the process.
 */
import cluster from "node:cluster";

export interface Served {
  url: string;
  close(): Promise<void>;
}

export function parseWorkers(text: string | undefined, flag: string): number {
  const n = Number(text ?? "1");
  if (!Number.isInteger(n) || n < 1 || n > 64) {
    console.error(`${flag} must be an integer from 1 to 64 (got ${text})`);
    process.exit(2);
  }
  return n;
}

/**
 * Run `start` in this process (N = 1) or in N workers; `readyLines(url)` is printed once on
 * stdout when serving. `name` prefixes the log lines on stderr.
 */
export async function serveWithWorkers(
  name: string,
  workers: number,
  start: () => Promise<Served>,
  readyLines: (url: string) => string[],
): Promise<void> {
  if (workers > 1 && cluster.isPrimary) return primary(name, workers, readyLines);
  const served = await start();
  if (cluster.isWorker) process.send?.({ listening: served.url });
  else for (const line of readyLines(served.url)) console.log(line);
  let stopping = false;
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      if (stopping) return;
      stopping = true;
      if (!cluster.isWorker) console.error(`${name}: ${signal}, closing`);
      served.close().then(
        () => process.exit(0),
        (err: unknown) => {
          console.error(err);
          process.exit(1);
        },
      );
    });
  }
}

async function primary(name: string, workers: number, readyLines: (url: string) => string[]): Promise<void> {
  let stopping = false;
  const fork = () => {
    const w = cluster.fork();
    w.once("exit", (code, signal) => {
      if (stopping) return;
      console.error(`${name}: worker ${w.process.pid} exited (${code ?? signal}); starting another`);
      fork();
    });
    return w;
  };
  const urls = await Promise.all(
    Array.from(
      { length: workers },
      () =>
        new Promise<string>((resolve, reject) => {
          const w = fork();
          w.on("message", (m: { listening?: string }) => m.listening && resolve(m.listening));
          w.once("exit", (code) => reject(new Error(`a worker exited (${code}) before it listened`)));
        }),
    ),
  );
  for (const line of readyLines(urls[0] as string)) console.log(line);
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      if (stopping) return;
      stopping = true;
      console.error(`${name}: ${signal}, closing ${workers} workers`);
      const alive = Object.values(cluster.workers ?? {}).filter((w) => w !== undefined && !w.isDead());
      const exited = alive.map((w) => new Promise<void>((r) => w?.once("exit", () => r())));
      for (const w of alive) w?.process.kill(signal);
      void Promise.all(exited).then(() => process.exit(0));
    });
  }
}
