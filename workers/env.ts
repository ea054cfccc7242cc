/**
 * The Worker's raw bindings as workerd hands them over; read only by gateway-config.ts and the
 * DOs. The namespaces are typed by the objects' RPC interfaces, never by the classes (rpc.ts says
 * why).
 */
import type { ChatSessionRpc, JobEventsRpc, TenantStreamsRpc } from "./durable-objects/rpc";

export interface Env {
  JOB_EVENTS: DurableObjectNamespace<JobEventsRpc>;
  CHAT_SESSIONS: DurableObjectNamespace<ChatSessionRpc>;
  TENANT_STREAMS: DurableObjectNamespace<TenantStreamsRpc>;
  /** The blob store (wrangler.toml r2_buckets): artifacts, content-addressed per tenant. */
  BLOBS: R2Bucket;
  DATABASE_URL?: string;
  NEON_FETCH_ENDPOINT?: string;
  UPSTASH_REDIS_REST_URL?: string;
  UPSTASH_REDIS_REST_TOKEN?: string;
  INTERNAL_SIGNING_SECRET?: string;
  INTERNAL_SIGNING_SECRET_PREVIOUS?: string;
  TOKEN_SIGNING_SECRET?: string;
  TOKEN_SIGNING_SECRET_PREVIOUS?: string;
  CORS_ALLOWED_ORIGINS?: string;
  MAX_BODY_BYTES?: string;
  RATE_LIMIT_REQUESTS?: string;
  RATE_LIMIT_WINDOW_S?: string;
  MAX_STREAMS_PER_TENANT?: string;
  MAX_QUEUED_JOBS_PER_TENANT?: string;
  MAX_AGENTS_PER_TENANT?: string;
  MAX_VERSIONS_PER_AGENT?: string;
  MAX_AGENT_BYTES_PER_TENANT?: string;
  OTEL_TRUST_CLIENT_SAMPLING?: string;
  MODELS?: string;
  MODEL_REGISTRY?: string;
  MCP_ALLOWED_URLS?: string;
  MCP_SECRET_NAMES?: string;
  WEBHOOK_ALLOWED_URLS?: string;
  REAPER_RUN_LOST_AFTER_MS?: string;
  REAPER_CLAIM_TIMEOUT_MS?: string;
  JOB_EVENTS_RETENTION_S?: string;
  JOB_RETENTION_S?: string;
  BLOB_GRACE_S?: string;
  /** Test hook: SSE keepalive period in ms (default 10 000). */
  SSE_HEARTBEAT_MS?: string;
}
