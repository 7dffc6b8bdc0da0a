import { test } from "node:test";
import assert from "node:assert/strict";
import { createConfigStore } from "../src/stores/config.ts";
import type { Settings } from "../src/stores/config.ts";
import { ApiError } from "../src/api/client.ts";
import type { CallOptions, EndpointName } from "../src/api/client.ts";

const initial: Settings = {
  general: { autoStart: true, notifications: false, darkMode: true },
  capture: { maxPacketSize: 65535, promiscuousMode: false, bufferSize: 4096 },
  detection: { sensitivityLevel: "medium", enabledLayers: ["network", "dns", "http", "tls", "behavioral"], autoBlock: false },
  storage: { retentionDays: 30, maxStorageGb: 10, exportFormat: "csv" },
};

function server() {
  let stored: Settings = structuredClone(initial);
  const puts: unknown[] = [];
  return {
    puts,
    async call<T>(name: EndpointName, options?: CallOptions): Promise<T> {
      if (name === "settings") return structuredClone(stored) as T;
      const body = options!.body as Partial<Settings>;
      puts.push(body);
      if (body.storage && body.storage.retentionDays! < 1) {
        throw new ApiError(422, "invalid settings", "invalid", { "storage.retentionDays": "must be at least 1" });
      }
      for (const [k, v] of Object.entries(body)) Object.assign((stored as unknown as Record<string, object>)[k], v);
      return structuredClone(stored) as T;
    },
  };
}

test("each update sends only its section's partial and takes the server's whole document back", async () => {
  const api = server();
  const store = createConfigStore(api);
  await store.load();
  assert.equal(await store.updateStorage({ retentionDays: 7 }), true);
  assert.equal(await store.updateGeneral({ notifications: true }), true);
  assert.equal(await store.updateDetection({ sensitivityLevel: "high" }), true);
  assert.equal(await store.updateCapture({ bufferSize: 8192 }), true);
  const s = store.settings.value!;
  assert.deepEqual(s.storage, { retentionDays: 7, maxStorageGb: 10, exportFormat: "csv" });
  assert.equal(s.general.notifications, true);
  assert.equal(s.general.darkMode, true);
  assert.equal(s.detection.sensitivityLevel, "high");
  assert.equal(s.capture.bufferSize, 8192);
  assert.equal(api.puts.length, 4);
  assert.deepEqual(api.puts[0], { storage: { retentionDays: 7 } });
  assert.deepEqual(api.puts[1], { general: { notifications: true } });
});

test("a refused update keeps the server's settings and exposes the field messages", async () => {
  const store = createConfigStore(server());
  await store.load();
  assert.equal(await store.updateStorage({ retentionDays: 0 }), false);
  assert.equal(store.settings.value!.storage.retentionDays, 30);
  assert.deepEqual(store.fieldErrors.value, { "storage.retentionDays": "must be at least 1" });
  assert.equal(store.error.value, "invalid settings");
  assert.equal(await store.updateStorage({ retentionDays: 3 }), true);
  assert.deepEqual(store.fieldErrors.value, {});
});

test("an update before load is refused in words, nothing sent", async () => {
  const api = server();
  const store = createConfigStore(api);
  assert.equal(await store.updateGeneral({ darkMode: false }), false);
  assert.equal(api.puts.length, 0);
  assert.match(store.error.value!, /not loaded/);
});
