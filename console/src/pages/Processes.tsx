// Processes from the agents' process stream. Terminated processes stay visible by default so that evidence
// does not disappear; a toggle hides them.
import { useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import type { Agent, ProcessEvent } from "../api/client.ts";
import { ErrorNote, Page, fmtTime, route, usePoll } from "../components/ui.tsx";
import { AgentSelect } from "./Flows.tsx";

function isTerminated(e: ProcessEvent): boolean {
  const kind = String(e.event_type ?? e.kind ?? e.type ?? e.state ?? "").toLowerCase();
  return kind.includes("exit") || kind.includes("terminat") || kind.includes("stop") || kind.includes("end");
}

export function Processes({ ctx }: PageProps) {
  const [agents, setAgents] = useState<Agent[]>([]);
  const [agentId, setAgentId] = useState(route.value.query.get("agent_id") ?? "");
  const [events, setEvents] = useState<ProcessEvent[]>([]);
  const [hideTerminated, setHideTerminated] = useState(false);
  const [error, setError] = useState<unknown>(null);
  usePoll(async () => {
    try {
      const list = (await ctx.api.agents()).agents;
      setAgents(list);
      const chosen = agentId || list[0]?.id || "";
      if (chosen !== agentId) setAgentId(chosen);
      setEvents(chosen ? (await ctx.api.agentEvents(chosen, "processes")).events : []);
      setError(null);
    } catch (err) { setError(err); }
  }, 5000, [agentId]);
  const shown = hideTerminated ? events.filter((e) => !isTerminated(e)) : events;
  const columns = [...new Set(events.flatMap((e) => Object.keys(e)))].slice(0, 8);
  return (
    <Page title="Processes">
      <div class="toolbar">
        <AgentSelect agents={agents} value={agentId} onChange={setAgentId} allowAll={false} />
        <label class="inline"><input type="checkbox" checked={hideTerminated} onChange={(e) => setHideTerminated(e.currentTarget.checked)} /> Hide terminated processes</label>
      </div>
      <ErrorNote error={error} />
      <table aria-label="Process events">
        <thead><tr>{columns.map((c) => <th scope="col" key={c}>{c}</th>)}</tr></thead>
        <tbody>
          {shown.map((e, i) => <tr key={i} class={isTerminated(e) ? "muted" : ""}>{columns.map((c) => (
            <td key={c} class="wrap">{/time|_at$/.test(c) && typeof e[c] === "string" ? fmtTime(e[c] as string) : String(e[c] ?? "")}</td>))}</tr>)}
          {!shown.length && <tr><td colSpan={Math.max(1, columns.length)} class="muted">No process events{agentId ? " from this agent" : ""}.</td></tr>}
        </tbody>
      </table>
    </Page>
  );
}
