import { test } from "node:test";
import assert from "node:assert/strict";
import { alertToThreat, CATEGORY_LAYER, createThreatsStore, MAX_THREATS } from "../src/stores/threats.ts";
import type { ThreatEvent } from "../src/stores/threats.ts";
import type { Alert } from "../src/api/client.ts";

function alert(id: string, severity: Alert["severity"], category = "DnsTunneling", last = "2026-11-23T08:00:00.000Z"): Alert {
  return { id, category, confidence: 0.9, severity, summary: `alert ${id}`, status: "New", agent_id: "agent-1",
           indicator: "evil.example", first_seen: last, last_seen: last, detection_count: 1,
           detections: [{ detector: "dns", category, confidence: 0.9, severity, flow_ids: ["f1"], first_seen: last,
                          last_seen: last, evidence: { protocol: "dns", transport: "udp", remote_ip: "203.0.113.9",
                                                       domain: "evil.example", bytes_out: 500, packets_out: 7 } }] };
}

function threat(id: string, severity: ThreatEvent["severity"]): ThreatEvent {
  return { id, timestamp: 1, severity, layer: "dns", description: id, sourceIp: "a", destinationIp: "b",
           protocol: "dns", bytes: 0, packets: 0 };
}

test("every appliance category maps onto one of the five layers", () => {
  const categories = ["DnsTunneling", "DomainGeneration", "DnsFlood", "RawIpTls", "IcmpCovertChannel",
                      "HttpExfiltration", "HttpCovertChannel", "Beaconing", "VolumeAnomaly"];
  assert.deepEqual(Object.keys(CATEGORY_LAYER).sort(), [...categories].sort());
  for (const c of categories) assert.ok(["network", "dns", "http", "tls", "behavioral"].includes(CATEGORY_LAYER[c]));
  assert.equal(alertToThreat(alert("x", "High", "RawIpTls")).layer, "tls");
  assert.equal(alertToThreat(alert("x", "High", "Beaconing")).layer, "behavioral");
});

test("an alert becomes a ThreatEvent with its evidence", () => {
  const t = alertToThreat(alert("a1", "Critical"));
  assert.deepEqual(t, { id: "a1", timestamp: Date.parse("2026-11-23T08:00:00.000Z"), severity: "critical", layer: "dns",
                        description: "alert a1", sourceIp: "agent-1", destinationIp: "203.0.113.9", protocol: "dns",
                        bytes: 500, packets: 7 });
});

test("addThreat appends and updates the severity counts", () => {
  const store = createThreatsStore({ alerts: async () => ({ alerts: [] }) });
  store.addThreat(threat("1", "high"));
  store.addThreat(threat("2", "high"));
  store.addThreat(threat("3", "low"));
  assert.deepEqual(store.severityCounts.value, { critical: 0, high: 2, medium: 0, low: 1 });
  assert.deepEqual(store.threats.value.map((t) => t.id), ["1", "2", "3"]);
});

test("the same alert seen again replaces its copy instead of counting twice", () => {
  const store = createThreatsStore({ alerts: async () => ({ alerts: [] }) });
  store.addThreat(threat("1", "low"));
  store.addThreat(threat("1", "critical"));
  assert.equal(store.threats.value.length, 1);
  assert.deepEqual(store.severityCounts.value, { critical: 1, high: 0, medium: 0, low: 0 });
});

test("at most 200 threats are kept, the oldest dropped, counts follow", () => {
  const store = createThreatsStore({ alerts: async () => ({ alerts: [] }) });
  for (let i = 0; i < MAX_THREATS + 50; i++) store.addThreat(threat(String(i), i < 50 ? "critical" : "low"));
  assert.equal(store.threats.value.length, MAX_THREATS);
  assert.equal(store.threats.value[0].id, "50");
  assert.deepEqual(store.severityCounts.value, { critical: 0, high: 0, medium: 0, low: MAX_THREATS });
});

test("refresh asks the API for 200 alerts and keeps them oldest first; an error is kept in words", async () => {
  const asked: unknown[] = [];
  let fail = false;
  const store = createThreatsStore({ alerts: async (q) => {
    asked.push(q);
    if (fail) throw new Error("appliance unreachable");
    return { alerts: [alert("new", "High", "DnsTunneling", "2026-11-23T09:00:00.000Z"), alert("old", "Low")] };
  } });
  await store.refresh({ status: "New" });
  assert.deepEqual(asked, [{ limit: MAX_THREATS, status: "New" }]);
  assert.deepEqual(store.threats.value.map((t) => t.id), ["old", "new"]);
  fail = true;
  await store.refresh();
  assert.equal(store.error.value, "appliance unreachable");
  assert.equal(store.threats.value.length, 2);
});
