// The Overview's analysis panel: where flows are analysed and whether analysis keeps up, from what
// GET /api/v1/metrics says (`analysis_worker`: the mode and its counters; the queue in front of it and how long its
// oldest flow has waited, `analysis_queue_oldest_s`: flows normally wait milliseconds, so BEHIND_S of it is
// analysis falling behind the traffic). The counters run since the appliance started, so a restart or a drop an
// hour ago still shows: each one is flows whose alerts may be missing. Nothing is guessed: a reply without
// `analysis_worker` reads "unknown".
import type { MetricsReply } from "../api/client.ts";

export type AnalysisLevel = "ok" | "warn" | "unknown";
export interface AnalysisHealth {
  level: AnalysisLevel;
  headline: string;
  where: string; // where analysis runs, in words
  details: string[];
}

const WHERE: Record<string, string> = {
  process: "in the analysis process",
  thread: "on a thread of the server",
  off: "nowhere (analysis.worker: off)",
  ingest: "on the cluster's analyzers (this node is an ingest node)",
  manager: "on the cluster's analyzers (this node is the manager)",
};

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function num(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) ? v : 0;
}

export const BEHIND_S = 10;

function count(n: number, one: string, many = `${one}s`): string {
  return `${n.toLocaleString("en-US")} ${n === 1 ? one : many}`;
}

/** `analysed`: flows analysed per second over the last tick (the metrics store's), when known. */
export function analysisHealth(reply: MetricsReply | null, analysed: number | null = null): AnalysisHealth {
  const worker = reply?.analysis_worker;
  if (reply == null || !isRecord(worker) || typeof worker.mode !== "string") {
    return { level: "unknown", headline: "Unknown", where: "", details: [] };
  }
  const mode = worker.mode;
  const running = worker.running === true;
  const cluster = isRecord(worker.cluster) ? worker.cluster : {};
  const details: string[] = [];
  let warn = false;
  let headline: string;
  if (mode === "off") {
    warn = true;
    headline = "Off: no alerts are raised";
    details.push(`${count(num(worker.flows_not_analysed), "flow")} not analysed since start`);
  } else if (mode === "ingest" || mode === "manager") {
    headline = running ? (mode === "ingest" ? "Sending to the cluster" : "Collecting the cluster's alerts") : "Redis unreachable";
    warn = !running;
    if (mode === "ingest") {
      details.push(`${count(num(cluster.flows_appended), "flow")} appended to Redis`);
      const trimmed = num(cluster.flows_trimmed_unread);
      if (trimmed > 0) {
        warn = true;
        details.push(`${count(trimmed, "flow")} trimmed from the stream before an analyzer read them (MAXLEN)`);
      }
    } else {
      details.push(`${count(num(cluster.alerts_consumed), "alert")} taken in`);
      if (num(cluster.alerts_refused) > 0) {
        warn = true;
        details.push(`${count(num(cluster.alerts_refused), "alert")} refused since start`);
      }
    }
  } else {
    headline = running ? "Running" : "Starting or restarting";
    warn = !running;
    if (analysed !== null) details.push(`analysing ${count(Math.round(analysed), "flow")} a second`);
  }
  if (mode !== "off" && mode !== "manager") {
    const waiting = num(reply.analysis_queue_depth), oldest = num(reply.analysis_queue_oldest_s);
    details.push(`${count(waiting, "flow")} waiting` + (waiting > 0 && oldest >= 1 ? `, the oldest for ${Math.round(oldest)} s` : ""));
    if (oldest >= BEHIND_S) {
      warn = true;
      if (running) headline = "Falling behind";
    }
  }
  const dropped = num(reply.analysis_queue_dropped);
  if (dropped > 0) {
    warn = true;
    details.push(`${count(dropped, "flow")} dropped since start: ` +
      (mode === "ingest" ? "the queue was full or Redis did not take them" : "analysis fell behind and the queue was full"));
  }
  const restarts = num(worker.restarts);
  if (restarts > 0) {
    warn = true;
    details.push(`restarted ${count(restarts, "time")} since start, ${count(num(worker.flows_lost), "flow")} lost with it`);
  }
  const errors = num(reply.analysis_errors);
  if (errors > 0) {
    warn = true;
    details.push(`${count(errors, "analysis error")} since start (the log says which layer)`);
  }
  let where = WHERE[mode] ?? mode;
  const cpus = Array.isArray(worker.cpus) ? worker.cpus.filter((c): c is number => typeof c === "number") : [];
  if (mode === "process" && cpus.length > 0) where += `, on CPU ${cpus.join(", ")} (analysis.pin_cpus)`;
  return { level: warn ? "warn" : "ok", headline, where, details };
}
