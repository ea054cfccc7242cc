/**
 * The console's shell: sign-in, navigation and the hash routes
 *   #/chat, #/chat/<conversation>, #/jobs, #/jobs/<job>, #/agents, #/agents/_new, #/agents/<name>[/<version>],
 *   #/schedules, #/schedules/<id>, #/webhooks, #/webhooks/<id> (its deliveries), #/usage,
 *   #/evals, #/evals/<id>, #/evals/<a>/compare/<b>.
 * A URL fragment `#key=<api key>` signs in at load (what `npm run dev` prints); the fragment never
 * reaches a server, and it is replaced at once so the key does not stay in the address bar or
 * the history. The key is exchanged for a token (api.ts) like a pasted one. A tab already signed
 * in asks first (`ReplaceSession`): anyone can send a link with their own key in it, and a tab
 * silently switched to another tenant would show, and take, what the user types as theirs. The
 * header always names the tenant the tab acts for.
 */
import { render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { AgentDetail, Agents, NewAgent } from "./agents";
import { client, newConversationId, onSessionChange, signedIn, signedInTenant, signIn, signOut } from "./api";
import { Chat } from "./chat";
import { EvalCompareView, EvalDetail, Evals } from "./evals";
import { Inspector } from "./inspector";
import { Jobs } from "./jobs";
import { ScheduleDetail, Schedules } from "./schedules";
import { UsagePage } from "./usage";
import { WebhookDeliveries, Webhooks } from "./webhooks";
import "./style.css";

/**
 * The key and route of a `#key=…&next=/route` fragment, with the fragment replaced at once (the key
 * must not stay in the address bar or the history): by the route when no session is kept, so the
 * key signs in there as before; by the chat home when one is, since the link's route is the link
 * sender's and waits for the user's answer (`ReplaceSession`).
 */
function takeFragmentKey(): { key: string; next: string } | null {
  const params = new URLSearchParams(location.hash.slice(1));
  const key = params.get("key");
  if (!key) return null;
  const next = params.get("next") ?? "/chat";
  history.replaceState(null, "", `${location.pathname}${location.search}#${signedIn() ? "/chat" : next}`);
  return { key, next };
}

/**
 * The in-page question a key in the fragment asks a tab that is already signed in: replace the
 * session (only once the link's key is known good), or keep it. A modal <dialog>, not confirm():
 * it names the tenant, can show a refused key's error, and is styled and checked like the rest.
 * Keeping is the default (focused first, and Escape).
 */
function ReplaceSession({ pending, onDone }: { pending: { key: string; next: string }; onDone: () => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const current = signedInTenant();
  useEffect(() => {
    ref.current?.showModal();
  }, []);
  const replace = async () => {
    setBusy(true);
    setError(null);
    try {
      await signIn(pending.key);
      location.hash = `#${pending.next}`;
      onDone();
    } catch (err) {
      setError(`Not signed in with the link's key: ${(err as Error).message}. You are still signed in as ${current}.`);
      setBusy(false);
    }
  };
  return (
    <dialog
      ref={ref}
      class="replace-session"
      aria-labelledby="replace-session-title"
      aria-describedby="replace-session-text"
      data-testid="replace-session"
      onCancel={onDone}
    >
      <h2 id="replace-session-title">Sign in with another key?</h2>
      <p id="replace-session-text">
        This link carries an API key. This tab is signed in as tenant <strong>{current}</strong>; signing in with the
        link's key replaces that session, and the console then acts for whichever tenant the key belongs to. Only
        continue if you opened this link yourself.
      </p>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <div class="actions">
        {/* biome-ignore lint/a11y/noAutofocus: the safe answer takes the focus in a modal dialog. */}
        <button type="button" class="primary" autoFocus onClick={onDone} disabled={busy}>
          Keep {current}
        </button>
        <button type="button" onClick={() => void replace()} disabled={busy}>
          {busy ? "Signing in…" : "Sign in with the link's key"}
        </button>
      </div>
    </dialog>
  );
}

function useRoute(): string[] {
  const read = () => location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const on = () => setRoute(read());
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return route;
}

function SignIn({ fragmentKey }: { fragmentKey: string | null }) {
  const [key, setKey] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const submit = async (k: string) => {
    setBusy(true);
    setError(null);
    try {
      await signIn(k);
    } catch (err) {
      setError(`Not signed in: ${(err as Error).message}`);
      setBusy(false);
    }
  };
  useEffect(() => {
    if (fragmentKey) void submit(fragmentKey);
  }, [fragmentKey]);
  return (
    <main class="signin" id="main">
      <h1>Edge agent runtime</h1>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (key.trim()) void submit(key);
        }}
      >
        <label for="api-key">API key</label>
        <input
          id="api-key"
          type="password"
          autoComplete="off"
          spellcheck={false}
          value={key}
          onInput={(e) => setKey((e.target as HTMLInputElement).value)}
          placeholder="ear_…"
        />
        <p class="muted">
          Exchanged for a short-lived token; the key itself stays in this tab's memory only, to renew the token.
        </p>
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" class="primary" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}

/** A conversation's name: its first user message, on one line, cut to fit the side list. */
const TITLE_CHARS = 48;
/** Names already read, for the tab's life (a conversation's first message never changes). */
const titles = new Map<string, string>();

/**
 * Names the listed conversations by their first message. The API has no list of conversations
 * with their first messages, so each is read once (GET /v1/conversations/{id}/messages), at most
 * four at a time, and kept; until it is read, or if it cannot be, the id names it.
 */
function useTitles(ids: readonly string[]): ReadonlyMap<string, string> {
  const [, setRead] = useState(0);
  useEffect(() => {
    const ctl = new AbortController();
    const todo = ids.filter((id) => !titles.has(id));
    const worker = async () => {
      for (let id = todo.shift(); id !== undefined && !ctl.signal.aborted; id = todo.shift()) {
        const first = await client
          .messages(id, { signal: ctl.signal })
          .then((m) => m.messages.find((x) => x.role === "user")?.content ?? null)
          .catch(() => null);
        if (first === null) continue;
        const line = first.replace(/\s+/g, " ").trim();
        titles.set(id, line.length > TITLE_CHARS ? `${line.slice(0, TITLE_CHARS - 1)}…` : line);
        setRead((n) => n + 1);
      }
    };
    void Promise.all([worker(), worker(), worker(), worker()]);
    return () => ctl.abort();
  }, [ids]);
  return titles;
}

function Conversations({ current }: { current: string | undefined }) {
  const [ids, setIds] = useState<string[]>([]);
  useEffect(() => {
    client
      .list({ limit: 100 })
      .then((p) => setIds([...new Set(p.jobs.flatMap((j) => (j.conversation_id ? [j.conversation_id] : [])))]))
      .catch(() => {});
  }, [current]);
  const named = useTitles(ids);
  const all = current && !ids.includes(current) ? [current, ...ids] : ids;
  return (
    <nav class="conversations" aria-label="Conversations">
      <a class="button primary" href={`#/chat/${newConversationId()}`}>
        New conversation
      </a>
      <ul>
        {all.map((id) => (
          <li key={id}>
            <a
              href={`#/chat/${id}`}
              aria-current={id === current ? "page" : undefined}
              title={id}
              data-conversation={id}
            >
              {named.get(id) ?? id}
            </a>
          </li>
        ))}
      </ul>
    </nav>
  );
}

const fragment = takeFragmentKey();
/** A key that arrived while a session was kept: it waits for the user's answer. */
const fragmentKey = fragment && !signedIn() ? fragment.key : null;

function App() {
  const [, setTick] = useState(0);
  const [pending, setPending] = useState(fragment && !fragmentKey ? fragment : null);
  useEffect(() => onSessionChange(() => setTick((t) => t + 1)), []);
  const route = useRoute();
  if (!signedIn()) return <SignIn fragmentKey={fragmentKey} />;
  const [section, id] = route;
  return (
    <>
      {/* A button, not a link to #main: the hash is the route here. */}
      <button type="button" class="skip" onClick={() => document.getElementById("main")?.focus()}>
        Skip to content
      </button>
      <header class="top">
        <strong>Edge agent runtime</strong>
        <nav aria-label="Sections">
          <a href="#/chat" aria-current={!section || section === "chat" ? "page" : undefined}>
            Chat
          </a>
          <a href="#/agents" aria-current={section === "agents" ? "page" : undefined}>
            Agents
          </a>
          <a href="#/jobs" aria-current={section === "jobs" ? "page" : undefined}>
            Jobs
          </a>
          <a href="#/schedules" aria-current={section === "schedules" ? "page" : undefined}>
            Schedules
          </a>
          <a href="#/webhooks" aria-current={section === "webhooks" ? "page" : undefined}>
            Webhooks
          </a>
          <a href="#/evals" aria-current={section === "evals" ? "page" : undefined}>
            Evals
          </a>
          <a href="#/usage" aria-current={section === "usage" ? "page" : undefined}>
            Usage
          </a>
        </nav>
        <span class="tenant" data-testid="tenant" title="The tenant this tab acts for (its API key's)">
          Tenant <strong>{signedInTenant()}</strong>
        </span>
        <button type="button" onClick={signOut}>
          Sign out
        </button>
      </header>
      {pending && <ReplaceSession pending={pending} onDone={() => setPending(null)} />}
      {section === "agents" ? (
        <main id="main" tabIndex={-1}>
          {/* `_new` cannot be an agent's name: names start with a letter or digit. */}
          {id === "_new" ? (
            <NewAgent />
          ) : id ? (
            <AgentDetail name={id} version={route[2] ? Number(route[2]) : null} />
          ) : (
            <Agents />
          )}
        </main>
      ) : section === "schedules" ? (
        <main id="main" tabIndex={-1}>
          {id ? <ScheduleDetail id={id} /> : <Schedules />}
        </main>
      ) : section === "webhooks" ? (
        <main id="main" tabIndex={-1}>
          {id ? <WebhookDeliveries id={id} /> : <Webhooks />}
        </main>
      ) : section === "evals" ? (
        <main id="main" tabIndex={-1}>
          {id && route[2] === "compare" && route[3] ? (
            <EvalCompareView a={id} b={route[3]} />
          ) : id ? (
            <EvalDetail id={id} />
          ) : (
            <Evals />
          )}
        </main>
      ) : section === "usage" ? (
        <main id="main" tabIndex={-1}>
          <UsagePage />
        </main>
      ) : section === "jobs" ? (
        <main id="main" tabIndex={-1}>
          {id ? <Inspector jobId={id} /> : <Jobs />}
        </main>
      ) : (
        <div class="with-side">
          <Conversations current={id} />
          <main id="main" tabIndex={-1}>
            {id ? <Chat conversationId={id} /> : <p class="muted">Pick a conversation or start a new one.</p>}
          </main>
        </div>
      )}
    </>
  );
}

render(<App />, document.getElementById("app") as HTMLElement);
