// Live packets/s and bytes/s (the 60-point metrics store), whether analysis keeps up, the 120-point server history,
// alerts by severity, agents online, top talkers.
import { useEffect, useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import type { Flow, MetricsHistoryReply } from "../api/client.ts";
import { Chart } from "../components/Chart.tsx";
import { ErrorNote, Page, fmtBytes, fmtNumber, usePoll } from "../components/ui.tsx";
import { SEVERITIES } from "../stores/threats.ts";
import { analysisHealth } from "../stores/analysis.ts";

interface Talker { key: string; agent: string; remote: string; bytes: number; flows: number }

function topTalkers(flows: Flow[]): Talker[] {
  const byKey = new Map<string, Talker>();
  for (const f of flows) {
    const key = `${f.agent_id} ${f.remote_ip}`;
    const t = byKey.get(key) ?? { key, agent: f.agent_id, remote: f.remote_ip, bytes: 0, flows: 0 };
    t.bytes += f.bytes_out + f.bytes_in;
    t.flows += 1;
    byKey.set(key, t);
  }
  return [...byKey.values()].sort((a, b) => b.bytes - a.bytes).slice(0, 5);
}

export function Overview({ ctx }: PageProps) {
  const { metrics, threats } = ctx;
  const [history, setHistory] = useState<MetricsHistoryReply | null>(null);
  const [talkers, setTalkers] = useState<Talker[]>([]);
  const [error, setError] = useState<unknown>(null);

  useEffect(() => {
    metrics.startTicking();
    return () => metrics.stopTicking();
  }, []);
  usePoll(async () => {
    try {
      const [h, f] = await Promise.all([ctx.api.metricsHistory(), ctx.api.flows({ limit: 500 })]);
      setHistory(h);
      setTalkers(topTalkers(f.flows));
      await threats.refresh({ not_status: "Resolved,FalsePositive" });
      setError(null);
    } catch (err) {
      setError(err);
    }
  }, 5000);

  const live = metrics.history.value;
  const snap = metrics.current.value;
  const raw = metrics.raw.value;
  const entries = history?.entries ?? [];
  const counts = threats.severityCounts.value;
  const analysis = analysisHealth(raw, metrics.analysed.value);
  return (
    <Page title="Overview">
      {metrics.error.value && <div class="error" role="alert">Live metrics: {metrics.error.value} (retrying every second)</div>}
      <ErrorNote error={error} />
      <div class="cards">
        <div class="card"><h2>Packets/s</h2><p class="big" data-testid="pps">{fmtNumber(snap.packetsPerSecond)}</p></div>
        <div class="card"><h2>Bytes/s</h2><p class="big">{fmtBytes(snap.bytesPerSecond)}</p></div>
        <div class="card"><h2>Total packets</h2><p class="big" data-testid="total-packets">{fmtNumber(snap.totalPackets)}</p></div>
        <div class="card"><h2>Active alerts</h2><p class="big">{snap.activeThreats}</p></div>
        <div class="card"><h2>Agents online</h2><p class="big">{typeof raw?.agents_online === "number" ? raw.agents_online : "—"}</p></div>
      </div>
      <section class={`panel analysis analysis-${analysis.level}`} aria-labelledby="analysis-title" data-testid="analysis">
        <h2 id="analysis-title">Analysis</h2>
        <p><strong data-testid="analysis-state">{analysis.headline}</strong>
          {analysis.where && <span class="muted"> — {analysis.where}</span>}</p>
        {analysis.details.length > 0 && (
          <ul data-testid="analysis-details">{analysis.details.map((d) => <li key={d}>{d}</li>)}</ul>
        )}
      </section>
      <div class="grid2">
        <Chart title="Live packets/s (last 60 s)" times={live.map((p) => p.timestamp / 1000)}
               series={[{ label: "packets/s", color: "#5fb3f9", values: live.map((p) => p.packetsPerSecond) }]} />
        <Chart title="Live bytes/s (last 60 s)" times={live.map((p) => p.timestamp / 1000)}
               series={[{ label: "bytes/s", color: "#f0a35e", values: live.map((p) => p.bytesPerSecond) }]} />
      </div>
      <Chart title={`Server history (${entries.length} snapshots, every ${history?.interval_s ?? "?"} s)`}
             times={entries.map((e) => (e.timestamp > 1e12 ? e.timestamp / 1000 : e.timestamp))}
             series={[{ label: "packets/s", color: "#5fb3f9", values: entries.map((e) => Number(e.packetsPerSecond ?? 0)) },
                      { label: "active alerts", color: "#ef6b73", values: entries.map((e) => Number(e.activeThreats ?? e.active_alerts ?? 0)) }]} />
      <div class="grid2">
        <section aria-labelledby="sev-title">
          <h2 id="sev-title">Open alerts by severity (newest 200)</h2>
          <ul class="sevlist">
            {SEVERITIES.map((s) => (
              <li key={s}><a href={`#/alerts?severity=${s[0].toUpperCase()}${s.slice(1)}`}>
                <span class={`sev sev-${s}`}>{s}</span> <strong data-testid={`count-${s}`}>{counts[s]}</strong></a></li>
            ))}
          </ul>
        </section>
        <section aria-labelledby="talkers-title">
          <h2 id="talkers-title">Top talkers (recent flows)</h2>
          <table>
            <thead><tr><th scope="col">Agent</th><th scope="col">Remote</th><th scope="col">Bytes</th><th scope="col">Flows</th></tr></thead>
            <tbody>
              {talkers.map((t) => (
                <tr key={t.key}><td><a href={`#/agents/${encodeURIComponent(t.agent)}`}>{t.agent.slice(0, 8)}</a></td>
                  <td>{t.remote}</td><td>{fmtBytes(t.bytes)}</td><td>{t.flows}</td></tr>
              ))}
              {talkers.length === 0 && <tr><td colSpan={4} class="muted">No flows yet.</td></tr>}
            </tbody>
          </table>
        </section>
      </div>
    </Page>
  );
}
