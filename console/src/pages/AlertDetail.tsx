// One alert: evidence of every correlated detection, its flows, the agent, a timeline, the triage history,
// triage buttons that follow the allowed transitions (with a note), and "add exclusion from this alert".
import { useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import type { Alert, AlertStatus } from "../api/client.ts";
import { TRANSITIONS } from "./triage.ts";
import { ErrorNote, Page, SeverityBadge, fmtTime, useLoad } from "../components/ui.tsx";

const LABELS: Record<AlertStatus, string> = {
  New: "Reopen", Acknowledged: "Acknowledge", Investigating: "Escalate", Resolved: "Resolve", FalsePositive: "False positive",
};
const EXCLUSION_PROTOCOLS = ["dns", "http", "tls", "icmp", "tcp", "udp", "any"];

function exclusionDefaults(alert: Alert): { value: string; protocol: string } {
  const ev = alert.detections[0]?.evidence ?? {};
  const str = (v: unknown) => (typeof v === "string" ? v : "");
  const value = str(ev.domain) || str(ev.remote_ip) || alert.indicator;
  const proto = str(ev.protocol).toLowerCase() || str(ev.transport).toLowerCase();
  return { value, protocol: EXCLUSION_PROTOCOLS.includes(proto) ? proto : "any" };
}

export function AlertDetail({ ctx, id }: PageProps) {
  const [alert, loadError, reload] = useLoad(() => ctx.api.alert(id!), [id]);
  const [note, setNote] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [message, setMessage] = useState("");
  const [excl, setExcl] = useState<{ value: string; protocol: string; comment: string; agentOnly: boolean } | null>(null);
  const [exclErrors, setExclErrors] = useState<Record<string, string>>({});

  if (loadError) return <Page title="Alert"><ErrorNote error={loadError} retry={reload} /></Page>;
  if (!alert) return <Page title="Alert"><p role="status">Loading…</p></Page>;

  const triage = async (status: AlertStatus) => {
    try {
      await ctx.api.setAlertStatus(alert.id, status, note || undefined);
      setMessage(`Status set to ${status}.`);
      setNote("");
      setError(null);
      reload();
    } catch (err) {
      setError(err);
    }
  };
  const addExclusion = async (e: Event) => {
    e.preventDefault();
    if (!excl) return;
    try {
      await ctx.api.addExclusion({ value: excl.value, protocol: excl.protocol, comment: excl.comment,
                                   agent_id: excl.agentOnly ? alert.agent_id : null });
      setMessage(`Exclusion added: ${excl.value} (${excl.protocol}).`);
      setExcl(null);
      setExclErrors({});
    } catch (err) {
      setExclErrors((err as { fields?: Record<string, string> }).fields ?? {});
      setError(err);
    }
  };
  const flowIds = [...new Set(alert.detections.flatMap((d) => d.flow_ids))];
  const timeline = [
    ...alert.detections.map((d) => ({ at: d.first_seen, text: `${d.detector} detected ${d.category} (confidence ${d.confidence.toFixed(2)})` })),
    ...(alert.history ?? []).map((h) => ({ at: h.at, text: `${h.actor}: ${h.from} → ${h.to}${h.note ? ` (“${h.note}”)` : ""}` })),
  ].sort((a, b) => a.at.localeCompare(b.at));

  return (
    <Page title={`Alert: ${alert.summary}`}>
      <p><a href="#/alerts">← Back to the inbox</a></p>
      <dl class="facts">
        <dt>Severity</dt><dd><SeverityBadge severity={alert.severity} /></dd>
        <dt>Status</dt><dd data-testid="alert-status">{alert.status}</dd>
        <dt>Category</dt><dd>{alert.category}</dd>
        <dt>Indicator</dt><dd class="wrap">{alert.indicator}</dd>
        <dt>Agent</dt><dd><a href={`#/agents/${encodeURIComponent(alert.agent_id)}`}>{alert.agent_id}</a></dd>
        <dt>Confidence</dt><dd>{alert.confidence.toFixed(2)}</dd>
        <dt>First / last seen</dt><dd>{fmtTime(alert.first_seen)} / {fmtTime(alert.last_seen)}</dd>
        <dt>Detections</dt><dd>{alert.detection_count}</dd>
      </dl>
      <section aria-labelledby="triage-title" class="panel">
        <h2 id="triage-title">Triage</h2>
        <label for="triage-note">Note (optional, kept in the history)</label>
        <textarea id="triage-note" rows={2} maxLength={1000} value={note} onInput={(e) => setNote(e.currentTarget.value)} />
        <div class="toolbar">
          {TRANSITIONS[alert.status].map((s) => <button key={s} type="button" onClick={() => triage(s)}>{LABELS[s]}</button>)}
          <button type="button" onClick={() => { setExcl({ ...exclusionDefaults(alert), comment: `from alert ${alert.id}`, agentOnly: false }); }}>
            Add exclusion from this alert</button>
        </div>
        <p role="status" class="muted">{message}</p>
        <ErrorNote error={error} />
        {excl && (
          <form onSubmit={addExclusion} class="panel" aria-labelledby="excl-title">
            <h3 id="excl-title">New exclusion</h3>
            <label for="excl-value">Value (IP, CIDR or domain)</label>
            <input id="excl-value" value={excl.value} aria-invalid={!!exclErrors.value} aria-describedby="excl-value-err"
                   onInput={(e) => setExcl({ ...excl, value: e.currentTarget.value })} />
            {exclErrors.value && <p id="excl-value-err" class="field-error">{exclErrors.value}</p>}
            <label for="excl-protocol">Protocol scope</label>
            <select id="excl-protocol" value={excl.protocol} onChange={(e) => setExcl({ ...excl, protocol: e.currentTarget.value })}>
              {EXCLUSION_PROTOCOLS.map((p) => <option key={p} value={p}>{p}</option>)}
            </select>
            <label class="inline"><input type="checkbox" checked={excl.agentOnly}
                   onChange={(e) => setExcl({ ...excl, agentOnly: e.currentTarget.checked })} /> Only for this agent</label>
            <label for="excl-comment">Comment</label>
            <input id="excl-comment" value={excl.comment} onInput={(e) => setExcl({ ...excl, comment: e.currentTarget.value })} />
            <button type="submit">Save exclusion</button>
          </form>
        )}
      </section>
      <section aria-labelledby="timeline-title">
        <h2 id="timeline-title">Timeline</h2>
        <ol class="timeline">{timeline.map((t, i) => <li key={i}><time>{fmtTime(t.at)}</time> {t.text}</li>)}</ol>
      </section>
      <section aria-labelledby="history-title">
        <h2 id="history-title">Triage history</h2>
        <table>
          <thead><tr><th scope="col">When</th><th scope="col">Who</th><th scope="col">From</th><th scope="col">To</th><th scope="col">Note</th></tr></thead>
          <tbody>
            {(alert.history ?? []).map((h, i) => (
              <tr key={i}><td>{fmtTime(h.at)}</td><td>{h.actor}</td><td>{h.from}</td><td>{h.to}</td><td class="wrap">{h.note ?? ""}</td></tr>
            ))}
            {!(alert.history ?? []).length && <tr><td colSpan={5} class="muted">No triage yet.</td></tr>}
          </tbody>
        </table>
      </section>
      <section aria-labelledby="evidence-title">
        <h2 id="evidence-title">Evidence</h2>
        {alert.detections.map((d, i) => (
          <article key={i} class="panel">
            <h3>{d.detector}: {d.category} <span class="muted">confidence {d.confidence.toFixed(2)}</span></h3>
            <dl class="facts">
              {Object.entries(d.evidence).map(([k, v]) => <><dt key={`k${k}`}>{k}</dt><dd key={`v${k}`} class="wrap">{typeof v === "object" ? JSON.stringify(v) : String(v)}</dd></>)}
            </dl>
          </article>
        ))}
      </section>
      <section aria-labelledby="flows-title">
        <h2 id="flows-title">Flows</h2>
        <ul>{flowIds.map((f) => <li key={f}><a href={`#/flows?id=${encodeURIComponent(f)}&agent_id=${encodeURIComponent(alert.agent_id)}`}><code>{f}</code></a></li>)}</ul>
      </section>
    </Page>
  );
}
