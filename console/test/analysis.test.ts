import { test } from "node:test";
import assert from "node:assert/strict";
import { analysisHealth, BEHIND_S } from "../src/stores/analysis.ts";
import type { MetricsReply } from "../src/api/client.ts";

const BASE = { timestamp: 1_700_000_000, totalPackets: 0, totalBytes: 0, packetsPerSecond: 0, bytesPerSecond: 0,
               activeThreats: 0, captureUptime: 0 };

function reply(worker: Record<string, unknown> | undefined, extra: Record<string, unknown> = {}): MetricsReply {
  return { ...BASE, analysis_queue_depth: 0, analysis_queue_dropped: 0, analysis_errors: 0,
           ...(worker ? { analysis_worker: worker } : {}), ...extra } as MetricsReply;
}

const process = (over: Record<string, unknown> = {}) =>
  ({ mode: "process", running: true, pid: 4242, restarts: 0, flows_lost: 0, flows_not_analysed: 0, ...over });

test("no reply, or a reply without analysis_worker, is unknown: nothing guessed", () => {
  assert.deepEqual(analysisHealth(null), { level: "unknown", headline: "Unknown", where: "", details: [] });
  assert.equal(analysisHealth(reply(undefined)).level, "unknown");
  assert.equal(analysisHealth(reply({ running: true })).level, "unknown");
});

test("the analysis process running with nothing dropped is ok, with the flows waiting", () => {
  const h = analysisHealth(reply(process(), { analysis_queue_depth: 1234 }));
  assert.equal(h.level, "ok");
  assert.equal(h.headline, "Running");
  assert.equal(h.where, "in the analysis process");
  assert.deepEqual(h.details, ["1,234 flows waiting"]);
  assert.equal(analysisHealth(reply(process({ cpus: [1] }))).where, "in the analysis process, on CPU 1 (analysis.pin_cpus)");
});

test("flows waiting long say how long; past BEHIND_S analysis is falling behind", () => {
  const fresh = analysisHealth(reply(process(), { analysis_queue_depth: 300, analysis_queue_oldest_s: 0.004 }));
  assert.equal(fresh.level, "ok");
  assert.deepEqual(fresh.details, ["300 flows waiting"]);
  const slow = analysisHealth(reply(process(), { analysis_queue_depth: 300, analysis_queue_oldest_s: 3.4 }));
  assert.equal(slow.level, "ok");
  assert.deepEqual(slow.details, ["300 flows waiting, the oldest for 3 s"]);
  const behind = analysisHealth(reply(process(), { analysis_queue_depth: 50_000, analysis_queue_oldest_s: BEHIND_S + 32.6 }));
  assert.equal(behind.level, "warn");
  assert.equal(behind.headline, "Falling behind");
  assert.deepEqual(behind.details, ["50,000 flows waiting, the oldest for 43 s"]);
  const restarting = analysisHealth(reply(process({ running: false }), { analysis_queue_depth: 9, analysis_queue_oldest_s: 60 }));
  assert.equal(restarting.headline, "Starting or restarting");
});

test("the flows analysed a second, when the metrics store knows them, come first", () => {
  const h = analysisHealth(reply(process(), { analysis_queue_depth: 12 }), 1234.4);
  assert.deepEqual(h.details, ["analysing 1,234 flows a second", "12 flows waiting"]);
  assert.deepEqual(analysisHealth(reply(process()), 0).details, ["analysing 0 flows a second", "0 flows waiting"]);
  assert.deepEqual(analysisHealth(reply({ mode: "off", running: false, flows_not_analysed: 3 }), 50).details,
                   ["3 flows not analysed since start"]);
});

test("a process that is not running says so and warns", () => {
  const h = analysisHealth(reply(process({ running: false })));
  assert.equal(h.level, "warn");
  assert.equal(h.headline, "Starting or restarting");
});

test("restarts, flows lost, drops and errors since start each warn with their counts", () => {
  const h = analysisHealth(reply(process({ restarts: 1, flows_lost: 256 }), { analysis_queue_dropped: 7, analysis_errors: 2 }));
  assert.equal(h.level, "warn");
  assert.equal(h.headline, "Running");
  assert.deepEqual(h.details, [
    "0 flows waiting",
    "7 flows dropped since start: analysis fell behind and the queue was full",
    "restarted 1 time since start, 256 flows lost with it",
    "2 analysis errors since start (the log says which layer)",
  ]);
  assert.match(analysisHealth(reply(process({ restarts: 3, flows_lost: 1 }))).details[1], /restarted 3 times since start, 1 flow lost/);
});

test("a thread of the server reads like the process", () => {
  const h = analysisHealth(reply({ mode: "thread", running: true, restarts: 0 }, { analysis_queue_depth: 1 }));
  assert.equal(h.level, "ok");
  assert.match(h.where, /thread of the server/);
  assert.deepEqual(h.details, ["1 flow waiting"]);
});

test("analysis off always warns: no alerts are raised", () => {
  const h = analysisHealth(reply({ mode: "off", running: false, flows_not_analysed: 12 }));
  assert.equal(h.level, "warn");
  assert.equal(h.headline, "Off: no alerts are raised");
  assert.deepEqual(h.details, ["12 flows not analysed since start"]);
});

test("a cluster ingest node: connected is ok, Redis gone or flows trimmed unread warn; drops name Redis", () => {
  const ok = analysisHealth(reply({ mode: "ingest", running: true, cluster: { flows_appended: 5000 } }));
  assert.equal(ok.level, "ok");
  assert.equal(ok.headline, "Sending to the cluster");
  assert.deepEqual(ok.details, ["5,000 flows appended to Redis", "0 flows waiting"]);
  const down = analysisHealth(reply({ mode: "ingest", running: false, cluster: { flows_appended: 5000, flows_trimmed_unread: 40 } },
                                    { analysis_queue_dropped: 9 }));
  assert.equal(down.level, "warn");
  assert.equal(down.headline, "Redis unreachable");
  assert.deepEqual(down.details.slice(1), [
    "40 flows trimmed from the stream before an analyzer read them (MAXLEN)",
    "0 flows waiting",
    "9 flows dropped since start: the queue was full or Redis did not take them",
  ]);
});

test("a cluster manager counts the alerts it took in and warns on refused ones", () => {
  const h = analysisHealth(reply({ mode: "manager", running: true, cluster: { alerts_consumed: 3, alerts_refused: 1 } }));
  assert.equal(h.level, "warn");
  assert.equal(h.headline, "Collecting the cluster's alerts");
  assert.deepEqual(h.details, ["3 alerts taken in", "1 alert refused since start"]);
});

test("counters that are not numbers count as zero", () => {
  const h = analysisHealth(reply(process({ restarts: "many", flows_lost: null }), { analysis_queue_depth: NaN }));
  assert.equal(h.level, "ok");
  assert.deepEqual(h.details, ["0 flows waiting"]);
});
