/**
 * A Redis write that only makes something happen sooner (a claimer wakes, an owner notices a
 * cancel): the fact itself is already committed in Postgres, which hosts also read, so the write
 * is bounded and its failure is logged, never raised.
 */
import { indexAndWake } from "../../src/quota/fleet-wake";
import { redisKeys } from "../../src/quota/keys";
import type { Redis } from "../../src/quota/redis";
import { type Deps, withTimeout } from "../deps";
import { type LogFields, log } from "../log";

const ACCELERATOR_TIMEOUT_MS = 500;

/**
 * Runs `write`; `defer`, when given, takes the write instead of it being awaited (a route passes
 * `waitUntil`): the answer only waits for the durable fact, not for the accelerator.
 */
export async function accelerate(
  deps: Deps,
  write: (redis: Redis) => Promise<unknown>,
  failure: { msg: string; fields: LogFields },
  defer?: (work: Promise<unknown>) => void,
): Promise<void> {
  const work = (async () => {
    try {
      await withTimeout(write(deps.redis()), ACCELERATOR_TIMEOUT_MS, "redis");
    } catch (err) {
      log.warn(failure.msg, { ...failure.fields, error: err });
    }
  })();
  if (defer) defer(work);
  else await work;
}

/**
 * Pokes every sleeping host (src/quota/fleet-wake.ts), for work that adds no job to the ready
 * index: a schedule created or changed (its first tick may be sooner than what they sleep until).
 * One Redis command; never awaited by the answer.
 */
export function wakeSleepers(deps: Deps, defer: (work: Promise<unknown>) => void): void {
  void accelerate(
    deps,
    (redis) => indexAndWake(redis, redisKeys(), []),
    { msg: "sleeping hosts not poked; they look at their next deadline", fields: {} },
    defer,
  );
}
