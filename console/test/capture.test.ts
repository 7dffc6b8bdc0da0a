import { test } from "node:test";
import assert from "node:assert/strict";
import { createCaptureStore } from "../src/stores/capture.ts";
import type { CaptureReply } from "../src/stores/capture.ts";
import { ApiError } from "../src/api/client.ts";
import type { CallOptions, EndpointName } from "../src/api/client.ts";

function reply(over: Partial<CaptureReply> = {}): CaptureReply {
  return { status: "idle", interface: null, promiscuous: false, snaplen: 65535, bufferSize: 64, autoStart: false,
           agentId: null, packetCount: 0, byteCount: 0, droppedCount: 0, protocolStats: {}, skipped: {}, uptime: 0,
           restarts: 0, lastError: null, lastErrorAt: null, pid: null, ...over };
}

test("start sends the selected interface and applies the server's counters", async () => {
  const calls: [EndpointName, CallOptions | undefined][] = [];
  const store = createCaptureStore({ async call<T>(name: EndpointName, options?: CallOptions): Promise<T> {
    calls.push([name, options]);
    const running = name === "captureStart";
    return reply({ status: running ? "running" : "idle", interface: "eth1", packetCount: running ? 42 : 0,
                   byteCount: 4200, droppedCount: 1, protocolStats: { TCP: 30, DNS: 12 }, uptime: 3.5 }) as T;
  } });
  store.setInterface("eth1");
  await store.start();
  assert.deepEqual(calls[0], ["captureStart", { body: { interface: "eth1" } }]);
  assert.equal(store.status.value, "running");
  assert.equal(store.packetCount.value, 42);
  assert.equal(store.uptime.value, 3.5);
  assert.deepEqual(store.protocolStats.value, { TCP: 30, UDP: 0, DNS: 12, HTTP: 0, TLS: 0, ICMP: 0 });
  await store.stop();
  assert.equal(store.status.value, "idle");
  assert.equal(calls[1][0], "captureStop");
});

test("the capture's own error state shows the server's last error", async () => {
  const store = createCaptureStore({ async call<T>(): Promise<T> {
    return reply({ status: "error", interface: "eth1", lastError: "interface eth1 vanished (netlink RTM_DELLINK)",
                   packetCount: 7 }) as T;
  } });
  await store.refresh();
  assert.equal(store.status.value, "error");
  assert.equal(store.message.value, "interface eth1 vanished (netlink RTM_DELLINK)");
  assert.equal(store.packetCount.value, 7);
});

test("a refused start (409) keeps the running state and says why", async () => {
  let first = true;
  const store = createCaptureStore({ async call<T>(name: EndpointName): Promise<T> {
    if (first) { first = false; return reply({ status: "running", interface: "eth0", packetCount: 5 }) as T; }
    assert.equal(name, "captureStart");
    throw new ApiError(409, "a capture is already running on eth0; stop it first", "ALREADY_RUNNING");
  } });
  await store.refresh();
  await store.start();
  assert.equal(store.status.value, "running");
  assert.equal(store.packetCount.value, 5);
  assert.equal(store.message.value, "a capture is already running on eth0; stop it first (HTTP 409)");
});

test("an unreachable API before any reply is an error with the words, and zero counters", async () => {
  const store = createCaptureStore({ async call<T>(): Promise<T> {
    throw new ApiError(403, "your role (analyst) cannot GET /api/v1/capture", "forbidden");
  } });
  await store.refresh();
  assert.equal(store.status.value, "error");
  assert.equal(store.message.value, "your role (analyst) cannot GET /api/v1/capture (HTTP 403)");
  assert.equal(store.packetCount.value, 0);
});

test("interfaces come from the API and the first non-loopback link that is up is preselected", async () => {
  const store = createCaptureStore({ async call<T>(name: EndpointName): Promise<T> {
    assert.equal(name, "captureInterfaces");
    const link = (name: string, up: boolean) => ({ name, index: 1, state: up ? "up" : "down", up, mac: null, addresses: [],
                                                   speed: null, promiscuous: false, mtu: 1500 });
    return { interfaces: [link("lo", true), link("eth0", false), link("eth1", true)] } as T;
  } });
  await store.loadInterfaces();
  assert.deepEqual(store.interfaces.value.map((i) => i.name), ["lo", "eth0", "eth1"]);
  assert.equal(store.selectedInterface.value, "eth1");
});
