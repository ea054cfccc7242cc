-- The client's W3C traceparent, kept as a link rather than the run's parent unless the operator
-- trusts clients' trace context (OTEL_TRUST_CLIENT_SAMPLING): a client must not decide whether
-- the operator's traces record its runs, nor choose their trace id. Nullable: no table rewrite.
ALTER TABLE "jobs" ADD COLUMN "client_traceparent" text;
