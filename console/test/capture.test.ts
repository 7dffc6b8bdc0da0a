import { test } from "node:test";
import assert from "node:assert/strict";
import { createCaptureStore } from "../src/stores/capture.ts";
import { ApiError } from "../src/api/client.ts";
import type { CallOptions, EndpointName } from "../src/api/client.ts";

test("until the capture API exists the store is in error with the API's message and zero counters", async () => {
  const store = createCaptureStore({ async call<T>(): Promise<T> {
    throw new ApiError(404, "No route GET /api/v1/capture", "not_found");
  } });
  await store.refresh();
  assert.equal(store.status.value, "error");
  assert.equal(store.message.value, "No route GET /api/v1/capture (HTTP 404)");
  assert.equal(store.packetCount.value, 0);
  assert.deepEqual(store.interfaces.value, []);
  await store.start();
  assert.equal(store.status.value, "error");
});

test("start sends the selected interface and applies the server's reply", async () => {
  const calls: [EndpointName, CallOptions | undefined][] = [];
  const store = createCaptureStore({ async call<T>(name: EndpointName, options?: CallOptions): Promise<T> {
    calls.push([name, options]);
    const running = name === "captureStart";
    return { status: running ? "running" : "idle", interface: "eth0", interfaces: ["eth0", "eth1"],
             packet_count: running ? 42 : 0, byte_count: 4200, dropped_count: 1,
             protocol_stats: { TCP: 30, DNS: 12 } } as T;
  } });
  store.setInterface("eth1");
  await store.start();
  assert.deepEqual(calls[0], ["captureStart", { body: { interface: "eth1" } }]);
  assert.equal(store.status.value, "running");
  assert.equal(store.packetCount.value, 42);
  assert.deepEqual(store.protocolStats.value, { TCP: 30, UDP: 0, DNS: 12, HTTP: 0, TLS: 0, ICMP: 0 });
  await store.stop();
  assert.equal(store.status.value, "idle");
  assert.equal(calls[1][0], "captureStop");
});
