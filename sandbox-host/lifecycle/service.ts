/**
 * One start/stop shape for every part of a host, and the rule the host follows with them:
 * started in the order given, stopped in the reverse order. A part that others depend on is
 * registered before them, so it is still there while they stop (the Postgres pool last of all).
 */
import { errorFields, type Logger } from "../log";

export interface Service {
  /** Which step this is, for the log. */
  readonly name: string;
  /** Default: nothing to start (the part works from construction, only its end is ordered). */
  start?(): void | Promise<void>;
  stop(): void | Promise<void>;
}

export interface StartedServices {
  /** Stop every started service in reverse order. Idempotent. */
  stop(): Promise<void>;
}

/**
 * Start `services` in order. If one fails to start, the ones already started are stopped (in
 * reverse) and the start error is thrown: a host that could not come up leaves nothing running.
 */
export async function startInOrder(services: readonly Service[], log: Logger): Promise<StartedServices> {
  const started: Service[] = [];
  try {
    for (const service of services) {
      await service.start?.();
      started.push(service);
    }
  } catch (err) {
    await stopInReverse(started, log).catch(() => {});
    throw err;
  }
  let stopping: Promise<void> | null = null;
  return {
    stop() {
      stopping ??= stopInReverse(started, log);
      return stopping;
    },
  };
}

/**
 * Every service gets its stop even when an earlier one failed (a closed pool must not leave the
 * metrics server listening); the first failure is thrown at the end so the caller still sees it.
 */
async function stopInReverse(started: readonly Service[], log: Logger): Promise<void> {
  let first: { err: unknown } | null = null;
  for (const service of [...started].reverse()) {
    try {
      await service.stop();
    } catch (err) {
      log.warn("service stop failed", { service: service.name, ...errorFields(err) });
      first ??= { err };
    }
  }
  if (first) throw first.err;
}
