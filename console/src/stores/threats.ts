// The `threats` store: the newest alerts as ThreatEvents (at most 200) and their counts per severity.
// Threats come only from GET /api/v1/alerts: there is no generator.
import { computed, signal } from "@preact/signals";
import type { Alert, Query } from "../api/client.ts";

export type ThreatSeverity = "critical" | "high" | "medium" | "low";
export type DetectionLayer = "network" | "dns" | "http" | "tls" | "behavioral";
export interface ThreatEvent {
  id: string;
  timestamp: number; // ms, the alert's last_seen
  severity: ThreatSeverity;
  layer: DetectionLayer;
  description: string;
  sourceIp: string; // the agent (the machine the traffic left)
  destinationIp: string; // evidence remote_ip, else the indicator
  protocol: string;
  bytes: number;
  packets: number;
}

export const MAX_THREATS = 200;
export const SEVERITIES: readonly ThreatSeverity[] = ["critical", "high", "medium", "low"];

/** Every alert category on one detection layer (README "Console" documents the same table). */
export const CATEGORY_LAYER: Readonly<Record<string, DetectionLayer>> = {
  DnsTunneling: "dns",
  DomainGeneration: "dns",
  DnsFlood: "dns",
  RawIpTls: "tls",
  IcmpCovertChannel: "network",
  HttpExfiltration: "http",
  HttpCovertChannel: "http",
  Beaconing: "behavioral",
  VolumeAnomaly: "behavioral",
};

function sumEvidence(alert: Alert, keys: string[]): number {
  let total = 0;
  for (const d of alert.detections ?? []) {
    for (const key of keys) {
      const v = d.evidence?.[key];
      if (typeof v === "number" && Number.isFinite(v)) total += v;
    }
  }
  return total;
}

export function alertToThreat(alert: Alert): ThreatEvent {
  const evidence = alert.detections?.[0]?.evidence ?? {};
  const text = (v: unknown) => (typeof v === "string" && v ? v : "");
  const severity = String(alert.severity).toLowerCase();
  return {
    id: alert.id,
    timestamp: Date.parse(alert.last_seen) || 0,
    severity: (SEVERITIES as readonly string[]).includes(severity) ? (severity as ThreatSeverity) : "low",
    layer: CATEGORY_LAYER[alert.category] ?? "network",
    description: alert.summary,
    sourceIp: alert.agent_id,
    destinationIp: text(evidence.remote_ip) || alert.indicator,
    protocol: text(evidence.protocol) || text(evidence.transport) || "unknown",
    bytes: sumEvidence(alert, ["bytes_out", "bytes_in", "bytes"]),
    packets: sumEvidence(alert, ["packets_out", "packets_in", "packets"]),
  };
}

export interface AlertSource { alerts(query: Query): Promise<{ alerts: Alert[] }> }

export function createThreatsStore(source: AlertSource) {
  const threats = signal<ThreatEvent[]>([]);
  const error = signal<string | null>(null);
  const severityCounts = computed(() => {
    const counts: Record<ThreatSeverity, number> = { critical: 0, high: 0, medium: 0, low: 0 };
    for (const t of threats.value) counts[t.severity] += 1;
    return counts;
  });

  /** Append a threat (an alert seen again replaces its older copy); keep the newest 200; counts follow. */
  function addThreat(threat: ThreatEvent): void {
    const rest = threats.value.filter((t) => t.id !== threat.id);
    rest.push(threat);
    threats.value = rest.length > MAX_THREATS ? rest.slice(rest.length - MAX_THREATS) : rest;
  }

  /** Replace the list with the server's newest alerts (the server is the truth: a deleted alert goes away);
   *  oldest are added first so the store ends newest-last. */
  async function refresh(query: Query = {}): Promise<void> {
    try {
      const page = await source.alerts({ limit: MAX_THREATS, ...query });
      const fresh = page.alerts.map(alertToThreat).sort((a, b) => a.timestamp - b.timestamp);
      threats.value = [];
      for (const t of fresh) addThreat(t);
      error.value = null;
    } catch (err) {
      error.value = err instanceof Error ? err.message : String(err);
    }
  }

  return { threats, severityCounts, error, addThreat, refresh };
}

export type ThreatsStore = ReturnType<typeof createThreatsStore>;
