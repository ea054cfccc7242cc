/**
 * What one cron backstop is (workers/scheduled.ts runs the list): its own module so the tasks and
 * the runner that lists them do not import each other.
 */

import type { Deps } from "../deps";
import type { Env } from "../env";
import type { GatewayConfig } from "../gateway-config";

export interface BackstopTask {
  name: string;
  /** Returns counts for the log line; throws when it could not do its work. */
  run(ctx: { config: GatewayConfig; deps: Deps; env: Env }): Promise<Record<string, number>>;
}
