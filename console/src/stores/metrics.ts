// The `metrics` store: the current MetricsSnapshot and a rolling 60-point history, fed by polling
// GET /api/v1/metrics once a second while ticking. Server state only: nothing here is invented.
import { signal } from "@preact/signals";
import type { MetricsReply } from "../api/client.ts";

export interface MetricsSnapshot {
  timestamp: number; // ms since the epoch
  totalPackets: number;
  totalBytes: number;
  packetsPerSecond: number;
  bytesPerSecond: number;
  activeThreats: number;
  captureUptime: number; // seconds
}
export interface MetricsDataPoint { timestamp: number; packetsPerSecond: number; bytesPerSecond: number }

export const HISTORY_POINTS = 60;
export const TICK_MS = 1000;

export interface MetricsSource { metrics(): Promise<MetricsReply> }
export interface Timer { set(fn: () => void, ms: number): unknown; clear(handle: unknown): void }
const realTimer: Timer = { set: (fn, ms) => setInterval(fn, ms), clear: (h) => clearInterval(h as number) };

const EMPTY: MetricsSnapshot = {
  timestamp: 0, totalPackets: 0, totalBytes: 0, packetsPerSecond: 0, bytesPerSecond: 0, activeThreats: 0, captureUptime: 0,
};

/** The appliance sends seconds (time.time()); the console keeps milliseconds like Date. */
function toMs(timestamp: number): number {
  return timestamp < 1e12 ? Math.round(timestamp * 1000) : timestamp;
}

export function toSnapshot(reply: MetricsReply): MetricsSnapshot {
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
  return {
    timestamp: toMs(num(reply.timestamp)), totalPackets: num(reply.totalPackets), totalBytes: num(reply.totalBytes),
    packetsPerSecond: num(reply.packetsPerSecond), bytesPerSecond: num(reply.bytesPerSecond),
    activeThreats: num(reply.activeThreats), captureUptime: num(reply.captureUptime),
  };
}

/** Flows analysed per second between two replies (`flows_processed` over the server's timestamps), or null: no
 * earlier reply, no time between them, or a counter that went back (the appliance restarted). */
export function analysedPerSecond(before: MetricsReply | null, after: MetricsReply): number | null {
  if (before === null) return null;
  const [f0, f1, t0, t1] = [before.flows_processed, after.flows_processed, before.timestamp, after.timestamp];
  if (typeof f0 !== "number" || typeof f1 !== "number" || typeof t0 !== "number" || typeof t1 !== "number") return null;
  const seconds = t1 - t0;
  return seconds > 0 && f1 >= f0 ? (f1 - f0) / seconds : null;
}

export function createMetricsStore(source: MetricsSource, timer: Timer = realTimer) {
  const current = signal<MetricsSnapshot>(EMPTY);
  const history = signal<MetricsDataPoint[]>([]);
  const raw = signal<MetricsReply | null>(null);
  const analysed = signal<number | null>(null); // flows/s analysed over the last tick
  const error = signal<string | null>(null);
  const ticking = signal(false);
  let handle: unknown = null;
  let inFlight: Promise<void> | null = null;

  /** Fetch one snapshot and add its point (at most 60 kept, oldest dropped). A failure keeps the history. */
  function tick(): Promise<void> {
    if (inFlight) return inFlight; // a slow server never stacks requests
    inFlight = (async () => {
      try {
        const reply = await source.metrics();
        const snap = toSnapshot(reply);
        analysed.value = analysedPerSecond(raw.value, reply);
        raw.value = reply;
        current.value = snap;
        const point = { timestamp: snap.timestamp, packetsPerSecond: snap.packetsPerSecond, bytesPerSecond: snap.bytesPerSecond };
        const prev = history.value;
        history.value = [...prev.slice(Math.max(0, prev.length - HISTORY_POINTS + 1)), point];
        error.value = null;
      } catch (err) {
        error.value = err instanceof Error ? err.message : String(err);
      } finally {
        inFlight = null;
      }
    })();
    return inFlight;
  }

  function startTicking(): void {
    if (handle !== null) return;
    ticking.value = true;
    void tick();
    handle = timer.set(() => void tick(), TICK_MS);
  }

  function stopTicking(): void {
    if (handle === null) return;
    timer.clear(handle);
    handle = null;
    ticking.value = false;
  }

  return { current, history, raw, analysed, error, ticking, tick, startTicking, stopTicking };
}

export type MetricsStore = ReturnType<typeof createMetricsStore>;
