/**
 * The console's shell: sign-in, navigation and the hash routes
 *   #/chat, #/chat/<conversation>, #/jobs, #/jobs/<job>, #/agents, #/agents/_new, #/agents/<name>[/<version>],
 *   #/schedules, #/schedules/<id>, #/webhooks, #/webhooks/<id> (its deliveries).
 * A URL fragment `#key=<api key>` signs in at load (what `npm run dev` prints); the fragment never
 * reaches a server, and it is replaced at once so the key does not stay in the address bar or
 * the history. The key is exchanged for a token (api.ts) like a pasted one.
 */
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { AgentDetail, Agents, NewAgent } from "./agents";
import { client, newConversationId, onSessionChange, signedIn, signIn, signOut } from "./api";
import { Chat } from "./chat";
import { Inspector } from "./inspector";
import { Jobs } from "./jobs";
import { ScheduleDetail, Schedules } from "./schedules";
import { WebhookDeliveries, Webhooks } from "./webhooks";
import "./style.css";

/** The key from a `#key=…&next=/route` fragment, with the fragment replaced by the route. */
function takeFragmentKey(): string | null {
  const params = new URLSearchParams(location.hash.slice(1));
  const key = params.get("key");
  if (!key) return null;
  signOut(); // this key, not a token kept from before, is the session now
  history.replaceState(null, "", `${location.pathname}${location.search}#${params.get("next") ?? "/chat"}`);
  return key;
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

function Conversations({ current }: { current: string | undefined }) {
  const [ids, setIds] = useState<string[]>([]);
  useEffect(() => {
    client
      .list({ limit: 100 })
      .then((p) => setIds([...new Set(p.jobs.flatMap((j) => (j.conversation_id ? [j.conversation_id] : [])))]))
      .catch(() => {});
  }, [current]);
  const all = current && !ids.includes(current) ? [current, ...ids] : ids;
  return (
    <nav class="conversations" aria-label="Conversations">
      <a class="button primary" href={`#/chat/${newConversationId()}`}>
        New conversation
      </a>
      <ul>
        {all.map((id) => (
          <li key={id}>
            <a href={`#/chat/${id}`} aria-current={id === current ? "page" : undefined}>
              {id}
            </a>
          </li>
        ))}
      </ul>
    </nav>
  );
}

const fragmentKey = takeFragmentKey();

function App() {
  const [, setTick] = useState(0);
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
        </nav>
        <button type="button" onClick={signOut}>
          Sign out
        </button>
      </header>
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
