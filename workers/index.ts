/**
 * Worker entry: the gateway app as the default fetch handler, the cron backstops as its scheduled
 * handler (workers/scheduled.ts), plus the Durable Object classes.
 */
import { createApp } from "./app";
import type { Env } from "./env";
import { runBackstops } from "./scheduled";

export { ChatSessionObject } from "./durable-objects/chat-session/chat-session-object";
export { JobEventsObject } from "./durable-objects/job-events/job-events-object";
export { TenantStreamsObject } from "./durable-objects/tenant-streams/tenant-streams-object";

const app = createApp();

export default {
  fetch: (request, env, ctx) => app.fetch(request, env, ctx),
  scheduled: (controller, env) => runBackstops(env, controller.cron),
} satisfies ExportedHandler<Env>;
