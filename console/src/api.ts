/**
 * The console's session and its client (src/client) for the gateway that served it.
 *
 * Sign-in exchanges the pasted API key for a short-lived write token (POST /v1/tokens); every
 * request, the event streams and the chat socket then carry the token, never the key. The key
 * stays in this module's memory only (never in storage or a URL), where it renews the token a
 * minute before it expires. The token is kept in sessionStorage (this tab only, gone when the tab
 * closes) so a reload keeps the session until the token expires; after a reload there is no key,
 * so the console asks for it again at that point. The token's tenant (the answer's `tenant_id`) is
 * kept with it, so the header can always say which tenant this tab acts for.
 */
import { EarClient } from "../../src/client/client";
import { ApiClientError } from "../../src/client/http";
import { stateOfTerminalEvent } from "../../src/contracts/job-state";

export type { ChatStatus } from "../../src/client/chat";
export type { AgentDefinitionInput, AgentView, ModelView } from "../../src/client/client";
export type { ServerFrame } from "../../src/contracts/chat";
export type { EventEnvelope } from "../../src/contracts/events";
export type { JobView, LatencyView } from "../../src/contracts/job";
export { ApiClientError };

const STORAGE_KEY = "ear.console.token";
/** Renew this long before expiry, so a request never carries a token that lapses in flight. */
const RENEW_BEFORE_MS = 60_000;

interface Token {
  token: string;
  expiresAt: number;
  tenantId: string;
}

let key: string | null = null;
let token: Token | null = readStoredToken();
let renewTimer: ReturnType<typeof setTimeout> | undefined;
const listeners = new Set<() => void>();

function readStoredToken(): Token | null {
  try {
    const t = JSON.parse(sessionStorage.getItem(STORAGE_KEY) ?? "null") as Token | null;
    // A token kept without its tenant (by an older console) is not a session this one can label.
    return t &&
      typeof t.token === "string" &&
      typeof t.tenantId === "string" &&
      t.expiresAt > Date.now() + RENEW_BEFORE_MS
      ? t
      : null;
  } catch {
    return null;
  }
}

function changed(): void {
  for (const l of listeners) l();
}

export function signedIn(): boolean {
  return token !== null;
}

/** The tenant this tab is signed in as, or null when signed out. */
export function signedInTenant(): string | null {
  return token?.tenantId ?? null;
}

export function onSessionChange(l: () => void): () => void {
  listeners.add(l);
  return () => listeners.delete(l);
}

async function mint(apiKey: string): Promise<Token> {
  const minter = new EarClient({ baseUrl: location.origin, credential: apiKey });
  const t = await minter.createToken({ scope: "write" });
  return { token: t.token, expiresAt: Date.parse(t.expires_at), tenantId: t.tenant_id };
}

function keep(t: Token): void {
  token = t;
  sessionStorage.setItem(STORAGE_KEY, JSON.stringify(t));
  clearTimeout(renewTimer);
  if (key !== null) {
    renewTimer = setTimeout(() => void renew(), Math.max(0, t.expiresAt - Date.now() - RENEW_BEFORE_MS));
  }
}

async function renew(): Promise<void> {
  if (key === null) return;
  try {
    keep(await mint(key));
  } catch (err) {
    // A revoked key ends the session; a network failure tries again shortly.
    if (err instanceof ApiClientError && err.status === 401) signOut();
    else renewTimer = setTimeout(() => void renew(), 5_000);
  }
}

/**
 * Exchanges the key for a token; throws ApiClientError (401 for a wrong key) without signing in.
 * Signed in already, the new session replaces the old one only once its token is minted, so a
 * wrong key leaves the current session as it was.
 */
export async function signIn(apiKey: string): Promise<void> {
  const t = await mint(apiKey.trim());
  key = apiKey.trim();
  keep(t);
  changed();
}

export function signOut(): void {
  key = null;
  token = null;
  clearTimeout(renewTimer);
  sessionStorage.removeItem(STORAGE_KEY);
  changed();
}

/** The current token; a lapsed one without a key to renew it ends the session. */
function credential(): string {
  if (token === null || token.expiresAt <= Date.now()) {
    signOut();
    throw new ApiClientError(401, "unauthorized", "the session expired: sign in again");
  }
  return token.token;
}

export const client = new EarClient({
  baseUrl: location.origin,
  credential,
  // A 401 (revoked key, token past its time) ends the session here rather than in every view.
  fetch: async (input, init) => {
    const res = await fetch(input, init);
    if (res.status === 401) queueMicrotask(signOut);
    return res;
  },
});

export const isTerminal = (type: string) => stateOfTerminalEvent(type) !== null;

/**
 * Ids this tab made for "New conversation" and has sent nothing in yet. Their history is known to
 * be empty, so the chat does not ask for it: the API answers 404 for a conversation with no job,
 * and the browser logs every 404 as an error in the console, which read as a fault on every new
 * conversation.
 */
const unused = new Set<string>();

export function newConversationId(): string {
  const id = `c-${crypto.randomUUID().slice(0, 8)}`;
  unused.add(id);
  return id;
}

export const isUnusedConversation = (id: string): boolean => unused.has(id);

/** The first message went out: from now on the conversation has a history to read. */
export function conversationUsed(id: string): void {
  unused.delete(id);
}
