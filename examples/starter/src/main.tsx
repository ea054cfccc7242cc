/**
 * The team's page: `useChat` with `EarChatTransport`. It holds no API key: the backend's
 * /api/token gives it a token bound to this one conversation, asked again before it expires.
 * A tool call waiting for approval shows an Approve button (the transport's `decide`); the
 * backend may decide instead, by its own policy (backend/server.ts).
 */
import { useChat } from "@ai-sdk/react";
import { EarChatTransport, type EarUIMessage } from "edge-agent-runtime/ai-sdk";
import { StrictMode, useMemo, useState } from "react";
import { createRoot } from "react-dom/client";

const conversation = new URLSearchParams(location.search).get("c") ?? `chat-${crypto.randomUUID()}`;

interface PageToken {
  token: string;
  expires_at: string;
  base_url: string;
}

let current: PageToken | null = null;
async function pageToken(): Promise<PageToken> {
  if (current && Date.parse(current.expires_at) - Date.now() > 60_000) return current;
  const res = await fetch("/api/token", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ conversation_id: conversation }),
  });
  if (!res.ok) throw new Error(`token: ${res.status} ${await res.text()}`);
  current = (await res.json()) as PageToken;
  return current;
}

function Chat(props: { baseUrl: string }) {
  const transport = useMemo(
    () =>
      new EarChatTransport({
        baseUrl: props.baseUrl,
        credential: async () => (await pageToken()).token,
        agent: "starter-support",
      }),
    [props.baseUrl],
  );
  const { messages, sendMessage, status, stop } = useChat<EarUIMessage>({ id: conversation, transport });
  const [input, setInput] = useState("");
  return (
    <main>
      <ol>
        {messages.map((m) => (
          <li key={m.id} className={m.role}>
            {m.parts.map((p) => (p.type === "text" ? p.text : "")).join("")}
            {m.parts.map((p) =>
              p.type === "data-approval" && p.data.kind === "approval" ? (
                <em key={p.data.call_id}>
                  {" "}
                  {p.data.tool}:{" "}
                  {p.data.decision ?? (
                    // The page's own token decides its own conversation's calls (403 for any other).
                    <button
                      type="button"
                      onClick={() =>
                        void transport.decide(conversation, {
                          job_id: p.data.job_id,
                          call_id: p.data.call_id,
                          decision: "approve",
                        })
                      }
                    >
                      Approve
                    </button>
                  )}
                </em>
              ) : null,
            )}
          </li>
        ))}
      </ol>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (input.trim()) void sendMessage({ text: input });
          setInput("");
        }}
      >
        <input aria-label="Message" value={input} onChange={(e) => setInput(e.target.value)} />
        {status === "streaming" ? (
          <button type="button" onClick={() => void stop()}>
            Stop
          </button>
        ) : (
          <button type="submit">Send</button>
        )}
      </form>
    </main>
  );
}

const root = document.getElementById("root");
if (root) {
  void pageToken().then(({ base_url }) =>
    createRoot(root).render(
      <StrictMode>
        <Chat baseUrl={base_url} />
      </StrictMode>,
    ),
  );
}
