import { useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import type { Agent, Flow } from "../api/client.ts";
import { ErrorNote, Page, fmtNumber, fmtTime, usePoll } from "../components/ui.tsx";
import { FlowTable } from "./Flows.tsx";

export function Agents({ ctx }: PageProps) {
  const [agents, setAgents] = useState<Agent[]>([]);
  const [error, setError] = useState<unknown>(null);
  usePoll(async () => {
    try { setAgents((await ctx.api.agents()).agents); setError(null); } catch (err) { setError(err); }
  }, 5000);
  return (
    <Page title="Agents">
      <ErrorNote error={error} />
      <table aria-label="Agents">
        <thead><tr><th scope="col">Host</th><th scope="col">Status</th><th scope="col">OS</th><th scope="col">Version</th>
          <th scope="col">Packets</th><th scope="col">Rejected</th><th scope="col">Dropped by agent</th><th scope="col">Last seen</th></tr></thead>
        <tbody>
          {agents.map((a) => (
            <tr key={a.id}><td><a href={`#/agents/${encodeURIComponent(a.id)}`}>{a.hostname || a.id}</a></td>
              <td><span class={`status status-${a.status}`}>{a.status}</span></td><td>{a.os}</td><td>{a.version}</td>
              <td>{fmtNumber(a.packets_received)}</td><td>{fmtNumber(a.packets_rejected)}</td><td>{fmtNumber(a.dropped_by_agent)}</td>
              <td>{fmtTime(a.last_seen)}</td></tr>
          ))}
          {!agents.length && <tr><td colSpan={8} class="muted">No agent has streamed yet: see Enrollment.</td></tr>}
        </tbody>
      </table>
    </Page>
  );
}

export function AgentDetail({ ctx, id }: PageProps) {
  const [agent, setAgent] = useState<Agent | null>(null);
  const [flows, setFlows] = useState<Flow[]>([]);
  const [error, setError] = useState<unknown>(null);
  usePoll(async () => {
    try {
      const [a, f] = await Promise.all([ctx.api.agent(id!), ctx.api.flows({ agent_id: id, limit: 100 })]);
      setAgent(a); setFlows(f.flows); setError(null);
    } catch (err) { setError(err); }
  }, 5000, [id]);
  return (
    <Page title={`Agent ${agent?.hostname ?? id}`}>
      <p><a href="#/agents">← All agents</a> · <a href={`#/alerts?agent_id=${encodeURIComponent(id!)}&view=all`}>Its alerts</a>
        {" "}· <a href={`#/processes?agent_id=${encodeURIComponent(id!)}`}>Its processes</a></p>
      <ErrorNote error={error} />
      {agent && (
        <dl class="facts">
          <dt>Id</dt><dd>{agent.id}</dd><dt>Status</dt><dd>{agent.status}</dd><dt>OS</dt><dd>{agent.os}</dd>
          <dt>Version</dt><dd>{agent.version}</dd><dt>Address</dt><dd>{agent.remote_address}</dd>
          <dt>Packets received</dt><dd>{agent.packets_received}</dd><dt>Rejected</dt><dd>{agent.packets_rejected}</dd>
          <dt>Dropped by agent</dt><dd>{agent.dropped_by_agent}</dd>
          <dt>First / last seen</dt><dd>{fmtTime(agent.first_seen)} / {fmtTime(agent.last_seen)}</dd>
        </dl>
      )}
      <h2>Recent flows</h2>
      <FlowTable flows={flows} />
    </Page>
  );
}
