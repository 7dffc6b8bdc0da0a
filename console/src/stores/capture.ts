// The `capture` store: the appliance's own port capture. Its REST surface is another issue: until it
// exists GET /api/v1/capture answers 404/501 and the store shows `error` with the API's message, never fake data.
import { signal } from "@preact/signals";
import { ApiError } from "../api/client.ts";
import type { CallOptions, EndpointName } from "../api/client.ts";

export type CaptureStatus = "idle" | "running" | "error";
export const PROTOCOLS = ["TCP", "UDP", "DNS", "HTTP", "TLS", "ICMP"] as const;
export type CaptureProtocol = (typeof PROTOCOLS)[number];
export interface CaptureReply {
  status: "idle" | "running"; interface?: string | null; interfaces?: string[]; packet_count?: number;
  byte_count?: number; dropped_count?: number; protocol_stats?: Partial<Record<CaptureProtocol, number>>;
}
export interface CaptureSource { call<T>(name: EndpointName, options?: CallOptions): Promise<T> }

function zeroStats(): Record<CaptureProtocol, number> {
  return { TCP: 0, UDP: 0, DNS: 0, HTTP: 0, TLS: 0, ICMP: 0 };
}

export function createCaptureStore(source: CaptureSource) {
  const status = signal<CaptureStatus>("idle");
  const message = signal<string | null>(null);
  const selectedInterface = signal<string | null>(null);
  const interfaces = signal<string[]>([]);
  const packetCount = signal(0);
  const byteCount = signal(0);
  const droppedCount = signal(0);
  const protocolStats = signal<Record<CaptureProtocol, number>>(zeroStats());

  function apply(reply: CaptureReply): void {
    status.value = reply.status === "running" ? "running" : "idle";
    message.value = null;
    interfaces.value = reply.interfaces ?? [];
    if (reply.interface) selectedInterface.value = reply.interface;
    packetCount.value = reply.packet_count ?? 0;
    byteCount.value = reply.byte_count ?? 0;
    droppedCount.value = reply.dropped_count ?? 0;
    protocolStats.value = { ...zeroStats(), ...(reply.protocol_stats ?? {}) };
  }

  function fail(err: unknown): void {
    status.value = "error";
    message.value = err instanceof ApiError ? `${err.message} (HTTP ${err.status})` : String(err);
  }

  async function run(name: EndpointName, options?: CallOptions): Promise<void> {
    try {
      apply(await source.call<CaptureReply>(name, options));
    } catch (err) {
      fail(err);
    }
  }

  return {
    status, message, selectedInterface, interfaces, packetCount, byteCount, droppedCount, protocolStats,
    refresh: () => run("capture"),
    start: () => run("captureStart", { body: { interface: selectedInterface.value } }),
    stop: () => run("captureStop", { body: {} }),
    /** Client state: the interface the next start() uses. */
    setInterface(name: string | null) { selectedInterface.value = name; },
  };
}

export type CaptureStore = ReturnType<typeof createCaptureStore>;
