/**
 * The agent picker's data and options, shared by the chat's "Agent" selector and the schedule
 * form: the first page of the tenant's live agents (up to 100, by name), each offered by name so a
 * job runs the agent's latest version when it is made.
 */
import { useEffect, useState } from "preact/hooks";
import { type AgentView, client } from "./api";

export function useLiveAgents(): AgentView[] {
  const [agents, setAgents] = useState<AgentView[]>([]);
  useEffect(() => {
    const ctl = new AbortController();
    client
      .listAgents({ limit: 100 }, { signal: ctl.signal })
      .then((p) => ctl.signal.aborted || setAgents(p.agents))
      .catch(() => {});
    return () => ctl.abort();
  }, []);
  return agents;
}

/** "none (default)", the chosen name if it is not among the live ones (kept, not dropped), then the live agents. */
export function AgentOptions({ agents, chosen }: { agents: readonly AgentView[]; chosen: string }) {
  return (
    <>
      <option value="">none (default)</option>
      {chosen && !agents.some((a) => a.name === chosen) && <option value={chosen}>{chosen}</option>}
      {agents.map((a) => (
        <option key={a.name} value={a.name}>
          {a.name} (latest v{a.latest_version})
        </option>
      ))}
    </>
  );
}
