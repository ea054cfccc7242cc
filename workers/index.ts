/** Worker entry: the gateway app as the default fetch handler, plus the Durable Object classes. */
import { createApp } from "./app";
import type { Env } from "./env";

export { ChatSessionObject } from "./durable-objects/chat-session";
export { JobEventsObject } from "./durable-objects/job-events";
export { TenantStreamsObject } from "./durable-objects/tenant-streams";

const app = createApp();

export default {
  fetch: (request, env, ctx) => app.fetch(request, env, ctx),
} satisfies ExportedHandler<Env>;
