import { useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import { ApiError } from "../api/client.ts";
import { ErrorNote, Page, fmtTime, route, useLoad } from "../components/ui.tsx";

const PROTOCOLS = ["any", "dns", "http", "tls", "icmp", "tcp", "udp"];

export function Exclusions({ ctx }: PageProps) {
  const [data, loadError, reload] = useLoad(() => ctx.api.exclusions());
  const [value, setValue] = useState(route.value.query.get("value") ?? "");
  const [protocol, setProtocol] = useState(route.value.query.get("protocol") ?? "any");
  const [agentId, setAgentId] = useState("");
  const [comment, setComment] = useState("");
  const [fields, setFields] = useState<Record<string, string>>({});
  const [error, setError] = useState<unknown>(null);
  const [message, setMessage] = useState("");

  const add = async (e: Event) => {
    e.preventDefault();
    setError(null); setFields({}); setMessage("");
    try {
      await ctx.api.addExclusion({ value, protocol, agent_id: agentId || null, comment });
      setMessage(`Added ${value}.`); setValue(""); setComment("");
      reload();
    } catch (err) {
      if (err instanceof ApiError && err.status === 422 && Object.keys(err.fields).length) setFields(err.fields);
      else setError(err);
    }
  };
  const remove = async (id: string) => {
    try { await ctx.api.deleteExclusion(id); reload(); } catch (err) { setError(err); }
  };
  const field = (name: string) => fields[name] ? <p id={`ex-${name}-err`} class="field-error">{fields[name]}</p> : null;
  return (
    <Page title="Exclusions">
      <ErrorNote error={loadError || error} retry={reload} />
      <form class="panel form-grid" onSubmit={add} aria-labelledby="add-ex">
        <h2 id="add-ex">Add an exclusion</h2>
        <label for="ex-value">Value (IP, CIDR or domain; a domain covers its subdomains)</label>
        <input id="ex-value" required value={value} aria-invalid={!!fields.value} aria-describedby="ex-value-err" onInput={(e) => setValue(e.currentTarget.value)} />
        {field("value")}
        <label for="ex-protocol">Protocol scope</label>
        <select id="ex-protocol" value={protocol} onChange={(e) => setProtocol(e.currentTarget.value)}>
          {PROTOCOLS.map((p) => <option key={p} value={p}>{p}</option>)}
        </select>
        {field("protocol")}
        <label for="ex-agent">Agent id (empty: every agent)</label>
        <input id="ex-agent" value={agentId} aria-invalid={!!fields.agent_id} onInput={(e) => setAgentId(e.currentTarget.value)} />
        {field("agent_id")}
        <label for="ex-comment">Comment</label>
        <input id="ex-comment" value={comment} onInput={(e) => setComment(e.currentTarget.value)} />
        {field("comment")}
        <button type="submit">Add exclusion</button>
        <p role="status" class="muted">{message}</p>
      </form>
      <table aria-label="Exclusions">
        <thead><tr><th scope="col">Value</th><th scope="col">Kind</th><th scope="col">Protocol</th><th scope="col">Agent</th>
          <th scope="col">Comment</th><th scope="col">Created</th><th scope="col">Remove</th></tr></thead>
        <tbody>
          {(data?.entries ?? []).map((x) => (
            <tr key={x.id}><td class="wrap">{x.value}</td><td>{x.kind}</td><td>{x.protocol}</td><td>{x.agent_id ?? "all"}</td>
              <td class="wrap">{x.comment}</td><td>{fmtTime(x.created_at)}</td>
              <td><button type="button" onClick={() => remove(x.id)} aria-label={`Remove exclusion ${x.value}`}>Remove</button></td></tr>
          ))}
          {data && !data.entries.length && <tr><td colSpan={7} class="muted">No exclusions.</td></tr>}
        </tbody>
      </table>
    </Page>
  );
}
