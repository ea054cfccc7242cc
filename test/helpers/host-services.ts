/**
 * What an in-process sandbox-host needs around it in a test: Postgres (template-cloned DBs),
 * redis-server behind the Upstash bridge, the mock model, and an ingest stub that acks every
 * batch (tools/stack/services/acking-ingest.ts) — for suites where event delivery is not under test.
 */

import { startUpstashBridge, type UpstashBridge } from "../../tools/bridges/upstash-rest/main";
import { type MockModel, startMockModel } from "../../tools/mock-model/main";
import { type AckingIngest, startAckingIngest } from "../../tools/stack/services/acking-ingest";
import { type RedisService, startRedis } from "../../tools/stack/services/redis";
import { startTestPostgres } from "./db";

export type { AckingIngest };

export interface HostServices {
  pgStack: Awaited<ReturnType<typeof startTestPostgres>>;
  redisService: RedisService;
  bridge: UpstashBridge;
  mock: MockModel;
  ingest: AckingIngest;
  stop(): Promise<void>;
}

export async function startHostServices(opts: {
  bridgeToken: string;
  mock?: Parameters<typeof startMockModel>[0];
}): Promise<HostServices> {
  const [pgStack, redisService, mock, ingest] = await Promise.all([
    startTestPostgres(),
    startRedis(),
    startMockModel(opts.mock),
    startAckingIngest(),
  ]);
  const bridge = await startUpstashBridge({ redisUrl: redisService.url, token: opts.bridgeToken, log: () => {} });
  return {
    pgStack,
    redisService,
    bridge,
    mock,
    ingest,
    async stop() {
      await bridge.close();
      await Promise.all([pgStack.stop(), redisService.stop(), mock.close(), ingest.close()]);
    },
  };
}
