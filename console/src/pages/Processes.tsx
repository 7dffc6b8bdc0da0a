// Processes from the agents' process stream. Terminated processes stay visible by default so that evidence
// does not disappear; a toggle hides them.
import { useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import type { Agent } from "../api/client.ts";
import { ErrorNote, Page, fmtTime, route, usePoll } from "../components/ui.tsx";
import { AgentSelect } from "./Flows.tsx";
import { foldProcesses } from "./processList.ts";
import type { ProcessEventIn, ProcessRow } from "./processList.ts";

export function Processes({ ctx }: PageProps) {
  const [agents, setAgents] = useState<Agent[]>([]);
  const [agentId, setAgentId] = useState(route.value.query.get("agent_id") ?? "");
  const [rows, setRows] = useState<ProcessRow[]>([]);
  const [hideTerminated, setHideTerminated] = useState(false);
  const [error, setError] = useState<unknown>(null);
  usePoll(async () => {
    try {
      const list = (await ctx.api.agents()).agents;
      setAgents(list);
      const chosen = agentId || list[0]?.id || "";
      if (chosen !== agentId) setAgentId(chosen);
      setRows(chosen ? foldProcesses((await ctx.api.agentEvents(chosen, "processes", 1000)).events as ProcessEventIn[]) : []);
      setError(null);
    } catch (err) { setError(err); }
  }, 5000, [agentId]);
  const shown = hideTerminated ? rows.filter((r) => r.exitedMs === null) : rows;
  return (
    <Page title="Processes">
      <div class="toolbar">
        <AgentSelect agents={agents} value={agentId} onChange={setAgentId} allowAll={false} />
        <label class="inline"><input type="checkbox" checked={hideTerminated} onChange={(e) => setHideTerminated(e.currentTarget.checked)} /> Hide terminated processes</label>
      </div>
      <ErrorNote error={error} />
      <table aria-label="Processes">
        <thead><tr><th scope="col">PID</th><th scope="col">Parent</th><th scope="col">Name</th><th scope="col">User</th>
          <th scope="col">Command line</th><th scope="col">Started</th><th scope="col">Terminated</th></tr></thead>
        <tbody>
          {shown.map((r) => (
            <tr key={`${r.pid}-${r.startedMs ?? r.exitedMs}`} class={r.exitedMs !== null ? "terminated" : ""}>
              <td>{r.pid}</td><td>{r.ppid || "—"}</td><td>{r.name}</td><td>{r.user}</td>
              <td class="wrap"><code>{r.commandLine || r.path}</code></td>
              <td>{r.startedMs !== null ? fmtTime(r.startedMs) : "before the stream"}</td>
              <td>{r.exitedMs !== null ? `${fmtTime(r.exitedMs)} (exit ${r.exitCode ?? "?"})` : "running"}</td>
            </tr>
          ))}
          {!shown.length && <tr><td colSpan={7} class="muted">No process events{agentId ? " from this agent" : ""}.</td></tr>}
        </tbody>
      </table>
    </Page>
  );
}
