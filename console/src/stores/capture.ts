// The `capture` store: the appliance's own port capture (GET /api/v1/capture, .../interfaces, start, stop).
// Server state only: the status and counters are the API's; a failed call keeps the last known state and says why.
import { signal } from "@preact/signals";
import { ApiError } from "../api/client.ts";
import type { CallOptions, EndpointName } from "../api/client.ts";

export type CaptureStatus = "idle" | "running" | "error";
export const PROTOCOLS = ["TCP", "UDP", "DNS", "HTTP", "TLS", "ICMP"] as const;
export type CaptureProtocol = (typeof PROTOCOLS)[number];
export interface InterfaceAddress { family: "ipv4" | "ipv6"; address: string; prefixlen: number }
export interface CaptureInterface {
  name: string; index: number; state: string; up: boolean; mac: string | null; addresses: InterfaceAddress[];
  speed: number | null; promiscuous: boolean; mtu: number | null;
}
/** GET /api/v1/capture (and the reply of start and stop): `CaptureStatus` in the OpenAPI document. */
export interface CaptureReply {
  status: CaptureStatus; interface: string | null; promiscuous: boolean; snaplen: number; bufferSize: number;
  autoStart: boolean; agentId: string | null; packetCount: number; byteCount: number; droppedCount: number;
  protocolStats: Partial<Record<CaptureProtocol, number>>; skipped?: Record<string, number>; uptime: number;
  restarts: number; lastError: string | null; lastErrorAt: string | null; pid: number | null;
}
export interface CaptureSource { call<T>(name: EndpointName, options?: CallOptions): Promise<T> }

function zeroStats(): Record<CaptureProtocol, number> {
  return { TCP: 0, UDP: 0, DNS: 0, HTTP: 0, TLS: 0, ICMP: 0 };
}

function describe(err: unknown): string {
  return err instanceof ApiError ? `${err.userMessage} (HTTP ${err.status})` : String(err);
}

export function createCaptureStore(source: CaptureSource) {
  const status = signal<CaptureStatus>("idle");
  /** What went wrong: the capture's own last error (status `error`) or the last refused call. */
  const message = signal<string | null>(null);
  const loaded = signal(false);
  const selectedInterface = signal<string | null>(null);
  const interfaces = signal<CaptureInterface[]>([]);
  const packetCount = signal(0);
  const byteCount = signal(0);
  const droppedCount = signal(0);
  const protocolStats = signal<Record<CaptureProtocol, number>>(zeroStats());
  const uptime = signal(0);
  const restarts = signal(0);
  const lastError = signal<string | null>(null);
  const promiscuous = signal(false);

  function apply(reply: CaptureReply): void {
    loaded.value = true;
    status.value = reply.status;
    lastError.value = reply.lastError;
    message.value = reply.status === "error" ? reply.lastError : null;
    if (reply.interface && (reply.status !== "idle" || !selectedInterface.value)) selectedInterface.value = reply.interface;
    packetCount.value = reply.packetCount;
    byteCount.value = reply.byteCount;
    droppedCount.value = reply.droppedCount;
    protocolStats.value = { ...zeroStats(), ...reply.protocolStats };
    uptime.value = reply.uptime;
    restarts.value = reply.restarts;
    promiscuous.value = reply.promiscuous;
  }

  async function run(name: EndpointName, options?: CallOptions): Promise<boolean> {
    try {
      apply(await source.call<CaptureReply>(name, options));
      return true;
    } catch (err) {
      message.value = describe(err); // the capture's state is unknown or unchanged: keep the last one shown
      if (!loaded.value) status.value = "error";
      return false;
    }
  }

  async function loadInterfaces(): Promise<void> {
    try {
      const reply = await source.call<{ interfaces: CaptureInterface[] }>("captureInterfaces");
      interfaces.value = reply.interfaces;
      if (!selectedInterface.value) {
        selectedInterface.value = reply.interfaces.find((i) => i.up && i.name !== "lo")?.name ?? null;
      }
    } catch (err) {
      message.value = describe(err);
    }
  }

  return {
    status, message, selectedInterface, interfaces, packetCount, byteCount, droppedCount, protocolStats, uptime,
    restarts, lastError, promiscuous,
    refresh: () => run("capture"),
    loadInterfaces,
    /** Start on the selected interface; the appliance fills snaplen, buffer and promiscuous mode from the settings. */
    start: () => run("captureStart", { body: { interface: selectedInterface.value } }),
    stop: () => run("captureStop", { body: {} }),
    /** Client state: the interface the next start() uses. */
    setInterface(name: string | null) { selectedInterface.value = name; },
  };
}

export type CaptureStore = ReturnType<typeof createCaptureStore>;
