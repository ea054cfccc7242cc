/**
 * The one database the proxy fronts. Both endpoints name a database in each request (the
 * WebSocket's `?address=host:port`, the HTTP `Neon-Connection-String` header); neither may
 * reach anything else, or the proxy would be an open relay from loopback to any host:port.
 */
import { createHash, timingSafeEqual } from "node:crypto";

export interface PgTarget {
  host: string;
  port: number;
  database: string;
  user: string;
  password: string;
}

const LOOPBACK = new Set(["localhost", "127.0.0.1", "::1"]);

/** `localhost`, `127.0.0.1` and `::1` name the same server; the proxy always dials the configured one. */
function sameHost(a: string, b: string): boolean {
  const norm = (h: string) => h.replace(/^\[|\]$/g, "").toLowerCase();
  const x = norm(a);
  const y = norm(b);
  return x === y || (LOOPBACK.has(x) && LOOPBACK.has(y));
}

export function parseTarget(databaseUrl: string): PgTarget {
  let url: URL;
  try {
    url = new URL(databaseUrl);
  } catch {
    throw new Error(`database URL is not a valid URL: ${databaseUrl}`);
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") {
    throw new Error(`database URL must start with postgres:// or postgresql:// (got ${url.protocol}//)`);
  }
  const database = decodeURIComponent(url.pathname.replace(/^\//, ""));
  if (!url.hostname || !database) throw new Error("database URL must name a host and a database");
  return {
    host: url.hostname.replace(/^\[|\]$/g, ""),
    port: url.port ? Number(url.port) : 5432,
    database,
    user: decodeURIComponent(url.username),
    password: decodeURIComponent(url.password),
  };
}

export function describeTarget(t: PgTarget): string {
  return `${t.host}:${t.port}/${t.database}`;
}

/** `host:port` from the WebSocket query string; IPv6 may come bracketed or bare. */
export function addressAllowed(address: string | null, target: PgTarget): boolean {
  if (!address) return false;
  const colon = address.lastIndexOf(":");
  if (colon <= 0) return false;
  const host = address.slice(0, colon);
  const port = Number(address.slice(colon + 1));
  return Number.isInteger(port) && port === target.port && sameHost(host, target.host);
}

/** Compared through fixed-length digests so the comparison's time says nothing about the secret. */
function sameSecret(a: string, b: string): boolean {
  const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();
  return timingSafeEqual(digest(a), digest(b));
}

export interface Refusal {
  message: string;
  /** Set when Postgres would have refused with a SQLSTATE of its own (28P01: bad password). */
  sqlstate?: string;
}

/**
 * Why a `Neon-Connection-String` does not name the configured database with its credentials, or
 * null when it does. The proxy's own pool logs in with the configured credentials, so without
 * this check any local process could run SQL through it knowing only the port.
 */
export function connectionStringMismatch(connectionString: string | undefined, target: PgTarget): Refusal | null {
  if (!connectionString) return { message: "missing Neon-Connection-String header" };
  return checkConnectionString(connectionString, target);
}

/**
 * connectionStringMismatch remembering the header texts it accepted: a client sends the same
 * connection string with every query, and a URL parse plus two SHA-256 digests per query was
 * work repeated for nothing. A refused text is checked in full every time; the set is looked up
 * by hash (no character-by-character comparison against an accepted secret) and bounded.
 */
export function connectionStringChecker(target: PgTarget, maxEntries = 16) {
  const accepted = new Set<string>();
  return (connectionString: string | undefined): Refusal | null => {
    if (!connectionString) return { message: "missing Neon-Connection-String header" };
    if (accepted.has(connectionString)) return null;
    const refusal = checkConnectionString(connectionString, target);
    if (refusal) return refusal;
    if (accepted.size >= maxEntries) accepted.clear();
    accepted.add(connectionString);
    return null;
  };
}

function checkConnectionString(connectionString: string, target: PgTarget): Refusal | null {
  let asked: PgTarget;
  try {
    asked = parseTarget(connectionString);
  } catch (err) {
    return { message: `Neon-Connection-String: ${(err as Error).message}` };
  }
  if (!sameHost(asked.host, target.host) || asked.port !== target.port || asked.database !== target.database) {
    return {
      message: `this pg-proxy serves only ${describeTarget(target)}; Neon-Connection-String names ${describeTarget(asked)}`,
    };
  }
  if (!sameSecret(asked.user, target.user) || !sameSecret(asked.password, target.password)) {
    // Postgres' own wording and SQLSTATE for a refused login, so clients treat both alike.
    return { message: `password authentication failed for user "${asked.user}"`, sqlstate: "28P01" };
  }
  return null;
}
