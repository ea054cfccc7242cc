/**
 * The example page: `useChat` from @ai-sdk/react with `EarChatTransport`. The conversation id is
 * in the URL (`?c=`), so a reload is the same chat: the page reads the history from the gateway
 * and `resume: true` picks up an answer still being written. The page holds no API key: its
 * server's `/api/token` (token.ts) gives it a token bound to this one conversation.
 */
import { useChat } from "@ai-sdk/react";
import { EarChatTransport, type EarUIMessage } from "edge-agent-runtime/ai-sdk";
import { EarClient, type TreeNode, useJob, useJobTree } from "edge-agent-runtime/react";
import { StrictMode, useMemo, useState } from "react";
import { createRoot } from "react-dom/client";
import type { PageToken } from "../token";

const params = new URLSearchParams(location.search);
const conversation = params.get("c") ?? `chat-${crypto.randomUUID()}`;
if (!params.has("c")) history.replaceState(null, "", `?c=${encodeURIComponent(conversation)}`);

/** A token from the page's server for `query` (`conversation=…` or `job=…`), asked again a minute before it expires. */
function tokenSource(query: string): () => Promise<PageToken> {
  let current: Promise<PageToken> | null = null;
  const fresh = async () => {
    const res = await fetch(`/api/token?${query}`);
    if (!res.ok) throw new Error(`token: ${res.status} ${await res.text()}`);
    return (await res.json()) as PageToken;
  };
  return () => {
    current ??= fresh();
    return current.then((t) => {
      if (Date.parse(t.expires_at) - Date.now() > 60_000) return t;
      current = fresh();
      return current;
    });
  };
}
const pageToken = tokenSource(`conversation=${encodeURIComponent(conversation)}`);
let gatewayUrl = "";

function Chat(props: { transport: EarChatTransport; initial: EarUIMessage[] }) {
  const { messages, sendMessage, status, stop, error } = useChat<EarUIMessage>({
    id: conversation,
    transport: props.transport,
    messages: props.initial,
    resume: true,
  });
  const [input, setInput] = useState("");
  const busy = status === "submitted" || status === "streaming";
  return (
    <main>
      <h1>Chat</h1>
      <div className="meta">
        conversation <code>{conversation}</code> · <span data-testid="status">{status}</span>
      </div>
      <ol data-testid="messages">
        {messages.map((m) => (
          <Message key={m.id} message={m} />
        ))}
      </ol>
      <RunDetails jobId={messages.findLast((m) => m.role === "assistant")?.metadata?.job_id ?? null} />
      {error && (
        <p className="error" data-testid="error">
          {error.message}
        </p>
      )}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (!input.trim()) return;
          void sendMessage({ text: input });
          setInput("");
        }}
      >
        <textarea
          aria-label="Message"
          value={input}
          onChange={(e) => setInput(e.target.value)}
          onKeyDown={(e) => {
            if (e.key === "Enter" && !e.shiftKey) {
              e.preventDefault();
              e.currentTarget.form?.requestSubmit();
            }
          }}
        />
        {busy ? (
          <button type="button" data-kind="stop" onClick={() => void stop()}>
            Stop
          </button>
        ) : (
          <button type="submit">Send</button>
        )}
      </form>
    </main>
  );
}

function Message({ message }: { message: EarUIMessage }) {
  const texts = message.parts.flatMap((p, at) => (p.type === "text" ? [{ at, text: p.text }] : []));
  if (message.role === "user") {
    return <li data-role="user">{texts.map((t) => t.text).join("")}</li>;
  }
  const latency = message.metadata?.latency;
  return (
    <li
      data-role="assistant"
      data-job-id={message.metadata?.job_id ?? message.id}
      data-state={message.metadata?.state ?? ""}
    >
      {message.parts.map((p, i) => {
        const key = `${message.id}:${i}`;
        if (p.type === "dynamic-tool")
          return (
            <div key={key} className="tool">
              {p.toolName}({JSON.stringify(p.input)}){" "}
              {p.state === "output-available" ? `→ ${JSON.stringify(p.output)}` : p.state}
            </div>
          );
        if (p.type === "data-approval")
          return (
            <div key={key} className="approval">
              {p.data.kind === "input" ? `asks: ${p.data.question}` : `waits for approval: ${p.data.tool}`}
              {p.data.decision ? ` · ${p.data.decision} (${p.data.decided_by})` : ""}
            </div>
          );
        return null;
      })}
      {/* The job's output is its last model turn's text; earlier turns are steps on the way. */}
      {texts.slice(0, -1).map((t) => (
        <p key={`${message.id}:${t.at}`} className="step">
          {t.text}
        </p>
      ))}
      <div data-testid="answer-text">{texts.at(-1)?.text ?? ""}</div>
      {message.metadata?.state && message.metadata.state !== "completed" && (
        <div className="footer">{message.metadata.state}</div>
      )}
      {latency?.total_latency_ms != null && (
        <div className="footer" data-testid="total-latency" data-ms={latency.total_latency_ms}>
          total {latency.total_latency_ms} ms · first output {latency.first_output_latency_ms ?? "–"} ms
        </div>
      )}
    </li>
  );
}

/** The latest answer's run, from useJob and useJobTree with a token bound to that job (read only). */
function RunDetails({ jobId }: { jobId: string | null }) {
  const client = useMemo(() => {
    if (jobId === null) return null;
    const token = tokenSource(`job=${encodeURIComponent(jobId)}`);
    return new EarClient({ baseUrl: gatewayUrl, credential: async () => (await token()).token });
  }, [jobId]);
  if (!client || !jobId) return null;
  return <RunPanel key={jobId} jobId={jobId} client={client} />;
}

const jobsIn = (n: TreeNode): number => 1 + n.children.reduce((a, c) => a + jobsIn(c), 0);

function RunPanel({ jobId, client }: { jobId: string; client: EarClient }) {
  const run = useJob(jobId, { client });
  const { tree } = useJobTree(jobId, { client });
  return (
    <aside className="run" data-testid="run">
      run <code>{jobId.slice(0, 8)}</code> · <span data-testid="run-state">{run.state ?? "…"}</span> ·{" "}
      <span data-testid="run-events">{run.events.length}</span> events · jobs in its tree{" "}
      <span data-testid="run-tree">{tree ? jobsIn(tree) : 0}</span>
      {run.latency?.total_latency_ms != null && (
        <>
          {" "}
          · total <span data-testid="run-latency">{run.latency.total_latency_ms}</span> ms
        </>
      )}
      {run.error != null && <span className="error"> · {String(run.error)}</span>}
    </aside>
  );
}

async function boot() {
  const root = createRoot(document.getElementById("root") as HTMLElement);
  const { base_url } = await pageToken();
  gatewayUrl = base_url;
  const transport = new EarChatTransport({ baseUrl: base_url, credential: async () => (await pageToken()).token });
  const initial = await transport.loadMessages(conversation);
  root.render(
    <StrictMode>
      <Chat transport={transport} initial={initial} />
    </StrictMode>,
  );
}
void boot();
