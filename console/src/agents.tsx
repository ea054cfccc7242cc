/**
 * Agents (GET/POST /v1/agents…): the tenant's live agents with cursor paging, one agent's
 * versions and definition, a form for a new agent or its next version (a version is never
 * edited: the form starts from the shown version and submits the whole definition), and archive
 * behind a confirmation. Routes: #/agents, #/agents/_new, #/agents/<name>, #/agents/<name>/<version>.
 */
import { useEffect, useRef, useState } from "preact/hooks";
import { TOOL_NAMES } from "../../src/contracts/tools";
import { type AgentDefinitionInput, type AgentView, client, type ModelView, newConversationId } from "./api";
import { setConversationAgent } from "./chat";
import { Field, FormEnd, text, useSubmit } from "./form";
import { Alert, day, errorText, ListTable, usePaged, when } from "./list";

const PAGE = 20;

type AgentTools = AgentView["tools"];
/** A tool entry is a name or `{name, requires_approval}` (the approval gate, docs/api.md). */
const toolName = (t: AgentTools[number]) => (typeof t === "string" ? t : t.name);
const toolLabel = (t: AgentTools[number]) =>
  typeof t !== "string" && t.requires_approval ? `${t.name} (needs approval)` : toolName(t);
const toolList = (tools: AgentTools) => (tools.length ? tools.map(toolLabel).join(", ") : "none");

type McpServers = AgentView["mcp_servers"];
/** An MCP server's allowed tool: a name, or `{name, requires_approval}`. */
const mcpToolLabel = (t: McpServers[number]["tools"][number]) =>
  typeof t === "string" ? t : t.requires_approval ? `${t.name} (needs approval)` : t.name;
/** Delegates are typed as names separated by commas or spaces. */
const parseNames = (v: string) => v.split(/[\s,]+/).filter(Boolean);

export function Agents() {
  const { page, error, pager } = usePaged<AgentView>(
    (cursor) =>
      client.listAgents({ limit: PAGE, cursor }).then((p) => ({ items: p.agents, next_cursor: p.next_cursor })),
    [],
  );
  return (
    <div class="agents">
      <h2>Agents</h2>
      <div class="toolbar">
        <a class="button primary" href="#/agents/_new">
          New agent
        </a>
        {pager}
      </div>
      <ListTable
        items={page?.items}
        error={error}
        empty="no agents yet"
        testId="agents-table"
        columns={["agent", "latest", "model", "tools", "created"]}
        row={(a) => (
          <tr key={a.name} data-agent={a.name}>
            <td>
              <a href={`#/agents/${encodeURIComponent(a.name)}`}>{a.name}</a>
            </td>
            <td>v{a.latest_version}</td>
            <td>{modelList(a.model)}</td>
            <td>{toolList(a.tools)}</td>
            <td>{when(a.created_at)}</td>
          </tr>
        )}
      />
    </div>
  );
}

/** An agent's model, or its list: the primary, then its fallbacks in order. */
const modelList = (m: string | string[]) => (typeof m === "string" ? m : m.join(" → "));
/** An agent's primary model (what a job runs first). */
const primaryModel = (m: string | string[]) => (typeof m === "string" ? m : (m[0] ?? ""));

const orNone = (v: number | null, unit = "") => (v === null ? "default" : `${v}${unit}`);

/** One version's definition, every field with its defaults filled in as the API answers it. */
function Definition({ agent }: { agent: AgentView }) {
  return (
    <section aria-labelledby="definition-head" data-testid="agent-definition" data-version={agent.version}>
      <h3 id="definition-head">
        Version {agent.version}
        {agent.version === agent.latest_version ? " (latest)" : ""}
      </h3>
      <table class="kv">
        <tbody>
          <tr>
            <th scope="row">model</th>
            <td data-field="model">{modelList(agent.model)}</td>
          </tr>
          <tr>
            <th scope="row">description</th>
            <td data-field="description">{agent.description || "–"}</td>
          </tr>
          <tr>
            <th scope="row">tools</th>
            <td data-field="tools">{toolList(agent.tools)}</td>
          </tr>
          <tr>
            <th scope="row">ask_user</th>
            <td data-field="ask_user">{agent.ask_user ? "yes: may ask and wait for an answer" : "no"}</td>
          </tr>
          <tr>
            <th scope="row">workspace</th>
            <td data-field="workspace">
              {agent.workspace === "conversation"
                ? "conversation: a job starts from the workspace its conversation's last job left"
                : "run: each job starts with an empty workspace"}
            </td>
          </tr>
          <tr>
            <th scope="row">delegates</th>
            <td data-field="delegates">
              {agent.delegates.length === 0
                ? "none"
                : agent.delegates.map((d, i) => (
                    <span key={d}>
                      {i > 0 && ", "}
                      <a href={`#/agents/${encodeURIComponent(d)}`}>{d}</a>
                    </span>
                  ))}
            </td>
          </tr>
          <tr>
            <th scope="row">waits</th>
            <td data-field="approval">
              decide within {agent.approval.deadline_s} s, then {agent.approval.on_deadline}
            </td>
          </tr>
          <tr>
            <th scope="row">priority</th>
            <td data-field="priority">{agent.priority ?? 0}</td>
          </tr>
          <tr>
            <th scope="row">max turns</th>
            <td data-field="max_turns">{agent.limits.max_turns}</td>
          </tr>
          <tr>
            <th scope="row">max output tokens</th>
            <td data-field="max_output_tokens">{orNone(agent.limits.max_output_tokens)}</td>
          </tr>
          <tr>
            <th scope="row">timeout</th>
            <td data-field="timeout_s">{orNone(agent.limits.timeout_s, " s")}</td>
          </tr>
          <tr>
            <th scope="row">max cost (tree)</th>
            <td data-field="max_cost_usd">
              {agent.limits.max_cost_usd == null ? "none" : `$${agent.limits.max_cost_usd}`}
            </td>
          </tr>
          <tr>
            <th scope="row">max tokens (tree)</th>
            <td data-field="max_tokens">{agent.limits.max_tokens ?? "none"}</td>
          </tr>
          <tr>
            <th scope="row">at the budget</th>
            <td data-field="on_budget">{agent.limits.on_budget}</td>
          </tr>
          <tr>
            <th scope="row">temperature</th>
            <td data-field="temperature">{orNone(agent.sampling.temperature)}</td>
          </tr>
          <tr>
            <th scope="row">top_p</th>
            <td data-field="top_p">{orNone(agent.sampling.top_p)}</td>
          </tr>
          <tr>
            <th scope="row">sandbox profile</th>
            <td data-field="sandbox_profile">{agent.sandbox_profile}</td>
          </tr>
          <tr>
            <th scope="row">host lost</th>
            <td data-field="recovery">
              {agent.recovery?.on_host_loss === "fail"
                ? "fail the run (lost)"
                : `resume from its journal, at most ${agent.recovery?.max_recoveries ?? 3} times`}
            </td>
          </tr>
          <tr>
            <th scope="row">created</th>
            <td>{when(agent.created_at)}</td>
          </tr>
        </tbody>
      </table>
      <h4>Instructions</h4>
      <pre class="block" data-field="instructions">
        {agent.instructions || "(none)"}
      </pre>
      <h4>MCP servers</h4>
      <McpServerList servers={agent.mcp_servers} />
      <h4>Response format</h4>
      <pre class="block" data-field="response_format">
        {agent.response_format === null ? "(free text)" : JSON.stringify(agent.response_format, null, 2)}
      </pre>
    </section>
  );
}

/** Each MCP server: its URL, its allowed tools (and which need approval), its headers' secrets, its timeout. */
function McpServerList({ servers }: { servers: McpServers }) {
  if (servers.length === 0)
    return (
      <p class="muted" data-field="mcp_servers">
        none
      </p>
    );
  return (
    <ul class="mcp-servers" data-field="mcp_servers">
      {servers.map((s) => (
        <li key={s.name} data-server={s.name}>
          <div>
            <code>{s.name}</code> <span class="url">{s.url}</span>
          </div>
          <div>tools: {s.tools.map(mcpToolLabel).join(", ")}</div>
          <div>
            headers:{" "}
            {Object.keys(s.headers).length === 0
              ? "none"
              : Object.entries(s.headers)
                  .map(([h, v]) => `${h} ← secret ${v.secret}`)
                  .join(", ")}
            {" · "}timeout {s.timeout_ms} ms
          </div>
        </li>
      ))}
    </ul>
  );
}

export function AgentDetail({ name, version }: { name: string; version: number | null }) {
  const [agent, setAgent] = useState<AgentView | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [editing, setEditing] = useState(false);
  const [confirming, setConfirming] = useState(false);
  const [reload, setReload] = useState(0);
  const keepRef = useRef<HTMLButtonElement>(null);
  const archiveRef = useRef<HTMLButtonElement>(null);
  const versions = usePaged<AgentView>(
    (cursor) =>
      client
        .listAgentVersions(name, { limit: PAGE, cursor })
        .then((p) => ({ items: p.versions, next_cursor: p.next_cursor })),
    [name, reload],
  );

  useEffect(() => {
    let live = true;
    setError(null);
    setAgent(null);
    setEditing(false);
    (version === null ? client.getAgent(name) : client.getAgentVersion(name, version))
      .then(({ agent: a }) => live && setAgent(a))
      .catch((err) => live && setError(errorText(err)));
    return () => {
      live = false;
    };
  }, [name, version, reload]);

  useEffect(() => {
    if (confirming) keepRef.current?.focus();
  }, [confirming]);

  /** Closes the confirmation and gives the focus back to the button that opened it. */
  const keep = () => {
    setConfirming(false);
    // After the re-render that brings the button back (Preact renders in a microtask queued first).
    queueMicrotask(() => archiveRef.current?.focus());
  };

  const archive = async () => {
    try {
      const { agent: a } = await client.archiveAgent(name);
      setConfirming(false);
      setAgent(version === null ? a : { ...(agent as AgentView), archived_at: a.archived_at });
    } catch (err) {
      setError(errorText(err));
    }
  };

  const archived = agent?.archived_at ?? null;
  return (
    <div class="agent">
      <p>
        <a href="#/agents">← Agents</a>
      </p>
      <h2>
        Agent <code>{name}</code>
        {agent && <span class="muted"> · latest v{agent.latest_version}</span>}
      </h2>
      <Alert error={error} />
      {archived && (
        <p class="banner" data-testid="archived">
          Archived {day(archived)}: new jobs and versions are refused; its versions stay readable.
        </p>
      )}
      {agent && !archived && !editing && (
        <div class="toolbar">
          <button type="button" class="primary" onClick={() => setEditing(true)}>
            New version
          </button>
          <button
            type="button"
            onClick={() => {
              const conversation = newConversationId();
              setConversationAgent(conversation, name);
              location.hash = `#/chat/${conversation}`;
            }}
          >
            Chat with it
          </button>
          {!confirming && (
            <button type="button" class="danger" ref={archiveRef} onClick={() => setConfirming(true)}>
              Archive…
            </button>
          )}
        </div>
      )}
      {confirming && (
        <fieldset
          class="confirm"
          data-testid="archive-confirm"
          onKeyDown={(e) => {
            if (e.key === "Escape") keep();
          }}
        >
          <legend class="sr-only">Confirm archive</legend>
          <p>
            Archive <strong>{name}</strong>? No new job or version may name it afterwards; this cannot be undone, and
            its name stays taken.
          </p>
          <button type="button" class="danger" onClick={() => void archive()}>
            Archive {name}
          </button>{" "}
          <button type="button" ref={keepRef} onClick={keep}>
            Keep it
          </button>
        </fieldset>
      )}
      {editing && agent && (
        <AgentForm
          base={agent}
          onCancel={() => setEditing(false)}
          onSaved={(a) => {
            setEditing(false);
            setReload((r) => r + 1);
            location.hash = `#/agents/${encodeURIComponent(a.name)}`;
          }}
        />
      )}
      <div class="agent-grid">
        <section aria-labelledby="versions-head">
          <h3 id="versions-head">Versions</h3>
          <Alert error={versions.error} />
          {versions.page && (
            <ol class="versions" data-testid="agent-versions">
              {versions.page.items.map((v) => {
                const current = v.version === (agent?.version ?? null);
                return (
                  <li key={v.version} data-version={v.version}>
                    <a
                      href={`#/agents/${encodeURIComponent(name)}/${v.version}`}
                      aria-current={current ? "page" : undefined}
                    >
                      v{v.version}
                    </a>{" "}
                    <span class="muted">
                      {modelList(v.model)} · {when(v.created_at)}
                    </span>
                  </li>
                );
              })}
            </ol>
          )}
          <div class="toolbar">{versions.pager}</div>
        </section>
        {agent && <Definition agent={agent} />}
      </div>
    </div>
  );
}

export function NewAgent() {
  return (
    <div class="agent">
      <p>
        <a href="#/agents">← Agents</a>
      </p>
      <h2>New agent</h2>
      <AgentForm
        base={null}
        onCancel={() => {
          location.hash = "#/agents";
        }}
        onSaved={(a) => {
          location.hash = `#/agents/${encodeURIComponent(a.name)}`;
        }}
      />
    </div>
  );
}

/** A number field's value: empty is null (the API's "default"). */
function numberOrNull(v: string): number | null {
  return v.trim() === "" ? null : Number(v);
}

/** A definition as the form posts it: every field named (none left to the API's default by omission). */
type DefinitionBody = Required<AgentDefinitionInput>;

/** A JSON field's text parsed, or the message naming the field; empty text is `empty`. */
function parseJson<T>(label: string, v: string, empty: T, check: (x: unknown) => string | null): T | string {
  if (!v.trim()) return empty;
  let parsed: unknown;
  try {
    parsed = JSON.parse(v);
  } catch (err) {
    return `${label} is not JSON: ${(err as Error).message}`;
  }
  const wrong = check(parsed);
  return wrong ? `${label} ${wrong}` : (parsed as T);
}

/**
 * The whole definition as a form: every field is edited here, or (the sandbox profile, which has
 * one value today) carried from the base unchanged, and the body is typed to name every field,
 * so a field added to the contract does not compile until the form handles it. With `base` (the
 * version shown) it starts from that version and posts the next one; without, it creates an
 * agent. The API checks every field (and answers 400 naming the one at fault, shown here); the
 * form checks only what it must to build the body: that the JSON fields are JSON of the right shape.
 */
function AgentForm({
  base,
  onSaved,
  onCancel,
}: {
  base: AgentView | null;
  onSaved: (a: AgentView) => void;
  onCancel: () => void;
}) {
  const [models, setModels] = useState<ModelView[] | null>(null);
  const [name, setName] = useState("");
  const [model, setModel] = useState(base ? primaryModel(base.model) : "");
  const [description, setDescription] = useState(base?.description ?? "");
  const [instructions, setInstructions] = useState(base?.instructions ?? "");
  const [tools, setTools] = useState<string[]>((base?.tools ?? []).map(toolName));
  // The tools whose calls wait for a person's approval (each checked tool's "needs approval").
  const [gated, setGated] = useState<string[]>(
    (base?.tools ?? []).filter((t) => typeof t !== "string" && t.requires_approval).map(toolName),
  );
  // The tools an agent may list (GET /v1/tools: sandbox tools, then the hosts' code tools); the
  // built-ins until it answers, and a tool the version lists stays offered even if no host has it now.
  const [toolChoices, setToolChoices] = useState<Array<{ name: string; description: string }>>(
    TOOL_NAMES.map((name) => ({ name, description: "" })),
  );
  const [askUser, setAskUser] = useState(base?.ask_user ?? false);
  const [delegates, setDelegates] = useState((base?.delegates ?? []).join(", "));
  const [mcp, setMcp] = useState(base?.mcp_servers.length ? JSON.stringify(base.mcp_servers, null, 2) : "");
  const [deadline, setDeadline] = useState(String(base?.approval.deadline_s ?? ""));
  const [onDeadline, setOnDeadline] = useState<AgentView["approval"]["on_deadline"]>(
    base?.approval.on_deadline ?? "deny",
  );
  const [priority, setPriority] = useState(String(base?.priority ?? ""));
  const [maxTurns, setMaxTurns] = useState(String(base?.limits.max_turns ?? ""));
  const [maxOutput, setMaxOutput] = useState(String(base?.limits.max_output_tokens ?? ""));
  const [timeout, setTimeoutS] = useState(String(base?.limits.timeout_s ?? ""));
  const [temperature, setTemperature] = useState(String(base?.sampling.temperature ?? ""));
  const [topP, setTopP] = useState(String(base?.sampling.top_p ?? ""));
  const [format, setFormat] = useState(base?.response_format ? JSON.stringify(base.response_format, null, 2) : "");
  const firstRef = useRef<HTMLInputElement & HTMLTextAreaElement>(null);

  const { busy, error, setError, submit } = useSubmit(async () => {
    const response_format = parseJson<Record<string, unknown> | null>("Response format", format, null, (x) =>
      x !== null && typeof x === "object" && !Array.isArray(x) ? null : "must be a JSON object (a JSON Schema)",
    );
    const mcp_servers = parseJson<DefinitionBody["mcp_servers"]>("MCP servers", mcp, [], (x) =>
      Array.isArray(x) ? null : 'must be a JSON array of servers: [{"name", "url", "tools", …}]',
    );
    const wrong = [response_format, mcp_servers].find((x) => typeof x === "string");
    if (typeof wrong === "string") throw new Error(wrong);
    // Every field, named: what the form does not edit is carried from the base unchanged.
    const definition: DefinitionBody = {
      // No field for fallbacks here yet: a new version keeps the base's after the chosen primary.
      model: base && typeof base.model !== "string" ? [model, ...base.model.filter((m) => m !== model)] : model,
      description,
      instructions,
      // A tool's idempotent flag (recovery may call it again) has no control here: carried from the base.
      tools: tools.map((n) => {
        const idempotent = base?.tools.some((t) => typeof t === "object" && t.name === n && t.idempotent === true);
        if (!gated.includes(n) && !idempotent) return n;
        return { name: n, requires_approval: gated.includes(n), ...(idempotent ? { idempotent: true } : {}) };
      }) as DefinitionBody["tools"],
      limits: {
        ...(maxTurns.trim() ? { max_turns: Number(maxTurns) } : {}),
        max_output_tokens: numberOrNull(maxOutput),
        timeout_s: numberOrNull(timeout),
        // No fields for the budget limits here yet: an edit keeps the version's rather than dropping them.
        max_cost_usd: base?.limits.max_cost_usd ?? null,
        max_tokens: base?.limits.max_tokens ?? null,
        on_budget: base?.limits.on_budget ?? "fail",
      },
      sampling: { temperature: numberOrNull(temperature), top_p: numberOrNull(topP) },
      priority: numberOrNull(priority) ?? 0,
      response_format: response_format as Record<string, unknown> | null,
      mcp_servers: mcp_servers as DefinitionBody["mcp_servers"],
      ask_user: askUser,
      delegates: parseNames(delegates),
      approval: { ...(deadline.trim() ? { deadline_s: Number(deadline) } : {}), on_deadline: onDeadline },
      sandbox_profile: base?.sandbox_profile ?? "default",
      recovery: base?.recovery ?? {},
      // No control for the workspace here yet: a new version keeps the base's.
      workspace: base?.workspace ?? "run",
    };
    onSaved(
      base
        ? (await client.createAgentVersion(base.name, definition)).agent
        : (await client.createAgent({ name, ...definition })).agent,
    );
  });

  useEffect(() => {
    firstRef.current?.focus();
    client
      .listModels()
      .then(({ models: m }) => {
        setModels(m);
        // A new agent starts on the deployment's default model.
        setModel((cur) => cur || (m.find((x) => x.default) ?? m[0])?.name || "");
      })
      .catch((err) => setError(`models: ${errorText(err)}`));
    client
      .listTools()
      .then(({ tools: listed }) => {
        const names = new Set(listed.map((t) => t.name));
        const kept = tools
          .filter((t) => !names.has(t))
          .map((name) => ({ name, description: "not offered by any host now" }));
        setToolChoices([...listed.map((t) => ({ name: t.name, description: t.description })), ...kept]);
      })
      .catch((err) => setError(`tools: ${errorText(err)}`));
  }, []);

  return (
    <form class="agent-form" onSubmit={submit} data-testid="agent-form" aria-labelledby="agent-form-head">
      <h3 id="agent-form-head">{base ? `New version of ${base.name} (from v${base.version})` : "Definition"}</h3>
      {!base && (
        <Field id="agent-name" label="Name" hint="a-z, 0-9, _ and -; cannot be changed later">
          <input
            id="agent-name"
            ref={firstRef}
            required
            spellcheck={false}
            autoComplete="off"
            {...text(name, setName)}
          />
        </Field>
      )}
      <Field id="agent-model" label="Model">
        <select id="agent-model" value={model} onChange={(e) => setModel((e.target as HTMLSelectElement).value)}>
          {!models && <option value={model}>{model || "loading…"}</option>}
          {models?.map((m) => (
            <option key={m.name} value={m.name}>
              {m.name}
              {m.default ? " (default)" : ""}
            </option>
          ))}
        </select>
      </Field>
      <Field id="agent-description" label="Description">
        <input id="agent-description" {...text(description, setDescription)} />
      </Field>
      <Field id="agent-instructions" label="Instructions" hint="the system prompt, sent first in every model turn">
        <textarea
          id="agent-instructions"
          rows={4}
          ref={base ? firstRef : undefined}
          {...text(instructions, setInstructions)}
        />
      </Field>
      <fieldset class="field">
        <legend>Tools</legend>
        {toolChoices.map(({ name: t, description: about }) => (
          <div key={t} class="tool-choice">
            <label class="check" title={about || undefined}>
              <input
                type="checkbox"
                checked={tools.includes(t)}
                onChange={(e) =>
                  setTools((e.target as HTMLInputElement).checked ? [...tools, t] : tools.filter((x) => x !== t))
                }
              />{" "}
              {t}
            </label>
            <label class="check gate">
              <input
                type="checkbox"
                aria-label={`${t} needs approval`}
                disabled={!tools.includes(t)}
                checked={tools.includes(t) && gated.includes(t)}
                onChange={(e) =>
                  setGated((e.target as HTMLInputElement).checked ? [...gated, t] : gated.filter((x) => x !== t))
                }
              />{" "}
              needs approval
            </label>
          </div>
        ))}
        <label class="check wrap">
          <input
            type="checkbox"
            checked={askUser}
            onChange={(e) => setAskUser((e.target as HTMLInputElement).checked)}
          />{" "}
          ask_user: the agent may ask a question and wait for the answer
        </label>
      </fieldset>
      <div class="field-row">
        <Field id="agent-deadline" label="Wait deadline (s)" hint="how long an approval or question waits; empty: 24 h">
          <input id="agent-deadline" type="number" min={1} {...text(deadline, setDeadline)} />
        </Field>
        <Field
          id="agent-on-deadline"
          label="At the deadline"
          hint="deny: the model is told the call was denied; fail: the job fails approval_expired"
        >
          <select
            id="agent-on-deadline"
            value={onDeadline}
            onChange={(e) => setOnDeadline((e.target as HTMLSelectElement).value as typeof onDeadline)}
          >
            <option value="deny">deny</option>
            <option value="fail">fail</option>
          </select>
        </Field>
      </div>
      <Field
        id="agent-delegates"
        label="Delegates"
        hint="agents it may hand work to (delegate_<name> tools), separated by commas"
      >
        <input id="agent-delegates" spellcheck={false} autoComplete="off" {...text(delegates, setDelegates)} />
      </Field>
      <Field
        id="agent-mcp"
        label="MCP servers (JSON)"
        hint='empty: none; else [{"name", "url", "tools": [name or {"name", "requires_approval"}], "headers", "timeout_ms"}]'
      >
        <textarea id="agent-mcp" rows={4} spellcheck={false} class="mono" {...text(mcp, setMcp)} />
      </Field>
      <div class="field-row">
        <Field
          id="agent-priority"
          label="Priority"
          hint="−100..100: its jobs' priority when a submit gives none; empty: 0"
        >
          <input id="agent-priority" type="number" min={-100} max={100} step={1} {...text(priority, setPriority)} />
        </Field>
        <Field id="agent-max-turns" label="Max turns" hint="default 8">
          <input id="agent-max-turns" type="number" min={1} {...text(maxTurns, setMaxTurns)} />
        </Field>
        <Field id="agent-max-output" label="Max output tokens" hint="empty: provider default">
          <input id="agent-max-output" type="number" min={1} {...text(maxOutput, setMaxOutput)} />
        </Field>
        <Field id="agent-timeout" label="Timeout (s)" hint="empty: 900">
          <input id="agent-timeout" type="number" min={1} {...text(timeout, setTimeoutS)} />
        </Field>
        <Field id="agent-temperature" label="Temperature">
          <input
            id="agent-temperature"
            type="number"
            min={0}
            max={2}
            step="any"
            {...text(temperature, setTemperature)}
          />
        </Field>
        <Field id="agent-top-p" label="top_p">
          <input id="agent-top-p" type="number" min={0} max={1} step="any" {...text(topP, setTopP)} />
        </Field>
      </div>
      <Field
        id="agent-format"
        label="Response format (JSON Schema)"
        hint="empty: free text; else the answer must be JSON valid against it"
      >
        <textarea id="agent-format" rows={4} spellcheck={false} class="mono" {...text(format, setFormat)} />
      </Field>
      <FormEnd error={error} busy={busy} label={base ? "Create version" : "Create agent"} disabled={!model}>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </FormEnd>
    </form>
  );
}
