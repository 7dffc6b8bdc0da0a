import { useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import type { Agent, Flow } from "../api/client.ts";
import { ErrorNote, Page, fmtBytes, fmtTime, route, usePoll } from "../components/ui.tsx";

/** The agent filter shared by Flows and Processes. */
export function AgentSelect({ agents, value, onChange, allowAll = true }: { agents: Agent[]; value: string; onChange: (v: string) => void; allowAll?: boolean }) {
  return (
    <label class="inline">Agent{" "}
      <select value={value} onChange={(e) => onChange(e.currentTarget.value)}>
        {allowAll && <option value="">All agents</option>}
        {agents.map((a) => <option key={a.id} value={a.id}>{a.hostname || a.id.slice(0, 8)} ({a.status})</option>)}
      </select>
    </label>
  );
}

export function FlowTable({ flows }: { flows: Flow[] }) {
  const highlight = route.value.query.get("id");
  return (
    <table aria-label="Flows">
      <thead><tr><th scope="col">Last seen</th><th scope="col">State</th><th scope="col">Proto</th><th scope="col">Local</th>
        <th scope="col">Remote</th><th scope="col">Out</th><th scope="col">In</th><th scope="col">Process</th><th scope="col">DNS</th></tr></thead>
      <tbody>
        {flows.map((f) => (
          <tr key={`${f.id}${f.state}${f.first_seen}`} class={f.id === highlight ? "cursor" : ""}>
            <td>{fmtTime(f.last_seen)}</td><td>{f.state}</td><td>{f.transport}</td>
            <td>{f.local_ip}:{f.local_port}</td><td>{f.remote_ip}:{f.remote_port}</td>
            <td>{fmtBytes(f.bytes_out)} / {f.packets_out}</td><td>{fmtBytes(f.bytes_in)} / {f.packets_in}</td>
            <td>{f.process_name || "—"}{f.pid ? ` (${f.pid})` : ""}</td><td class="wrap">{f.dns_queries.slice(0, 3).join(", ")}</td>
          </tr>
        ))}
        {!flows.length && <tr><td colSpan={9} class="muted">No flows.</td></tr>}
      </tbody>
    </table>
  );
}

export function Flows({ ctx }: PageProps) {
  const [agentId, setAgentId] = useState(route.value.query.get("agent_id") ?? "");
  const [flows, setFlows] = useState<Flow[]>([]);
  const [agents, setAgents] = useState<Agent[]>([]);
  const [error, setError] = useState<unknown>(null);
  usePoll(async () => {
    try {
      const [f, a] = await Promise.all([ctx.api.flows({ agent_id: agentId, limit: 300 }), ctx.api.agents()]);
      setFlows(f.flows);
      setAgents(a.agents);
      setError(null);
    } catch (err) { setError(err); }
  }, 5000, [agentId]);
  return (
    <Page title="Flows">
      <div class="toolbar"><AgentSelect agents={agents} value={agentId} onChange={setAgentId} /></div>
      <ErrorNote error={error} />
      <FlowTable flows={flows} />
    </Page>
  );
}
