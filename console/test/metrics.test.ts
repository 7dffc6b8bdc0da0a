import { test } from "node:test";
import assert from "node:assert/strict";
import { analysedPerSecond, createMetricsStore, HISTORY_POINTS, TICK_MS } from "../src/stores/metrics.ts";
import type { MetricsReply } from "../src/api/client.ts";

function reply(i: number): MetricsReply {
  return { timestamp: 1_700_000_000 + i, totalPackets: 100 * i, totalBytes: 1000 * i, packetsPerSecond: i,
           bytesPerSecond: 10 * i, activeThreats: i % 3, captureUptime: i };
}

function manualTimer() {
  const timers = new Map<number, () => void>();
  let next = 1;
  return {
    timers, periods: [] as number[],
    set(fn: () => void, ms: number) { this.periods.push(ms); timers.set(next, fn); return next++; },
    clear(h: unknown) { timers.delete(h as number); },
    fire() { for (const fn of timers.values()) fn(); },
  };
}

test("tick adds the snapshot as current and one history point, timestamps in ms", async () => {
  let i = 0;
  const store = createMetricsStore({ metrics: async () => reply(++i) });
  await store.tick();
  assert.equal(store.current.value.totalPackets, 100);
  assert.equal(store.current.value.timestamp, (1_700_000_000 + 1) * 1000);
  assert.deepEqual(store.history.value, [{ timestamp: 1_700_000_001_000, packetsPerSecond: 1, bytesPerSecond: 10 }]);
});

test("history rolls at 60 points, oldest dropped", async () => {
  let i = 0;
  const store = createMetricsStore({ metrics: async () => reply(++i) });
  for (let n = 0; n < HISTORY_POINTS + 15; n++) await store.tick();
  assert.equal(store.history.value.length, HISTORY_POINTS);
  assert.equal(store.history.value[0].packetsPerSecond, 16);
  assert.equal(store.history.value.at(-1)!.packetsPerSecond, HISTORY_POINTS + 15);
});

test("a failing poll sets error, keeps the history, and the next success clears it", async () => {
  let fail = false;
  let i = 0;
  const store = createMetricsStore({ metrics: async () => { if (fail) throw new Error("HTTP 502"); return reply(++i); } });
  await store.tick();
  fail = true;
  await store.tick();
  assert.equal(store.error.value, "HTTP 502");
  assert.equal(store.history.value.length, 1);
  fail = false;
  await store.tick();
  assert.equal(store.error.value, null);
  assert.equal(store.history.value.length, 2);
});

test("startTicking polls every second until stopTicking; starting twice keeps one interval", async () => {
  let calls = 0;
  const timer = manualTimer();
  const store = createMetricsStore({ metrics: async () => reply(++calls) }, timer);
  store.startTicking();
  store.startTicking();
  assert.equal(timer.timers.size, 1);
  assert.deepEqual(timer.periods, [TICK_MS]);
  assert.equal(store.ticking.value, true);
  await store.tick();
  timer.fire();
  await store.tick();
  assert.ok(calls >= 2);
  store.stopTicking();
  assert.equal(timer.timers.size, 0);
  assert.equal(store.ticking.value, false);
});

test("ticks never overlap while a request is in flight", async () => {
  let calls = 0;
  let release!: () => void;
  const store = createMetricsStore({ metrics: () => { calls++; return new Promise((r) => { release = () => r(reply(calls)); }); } });
  const a = store.tick();
  const b = store.tick();
  assert.equal(calls, 1);
  release();
  await Promise.all([a, b]);
  assert.equal(store.history.value.length, 1);
});

test("non-numeric fields read as 0, never NaN", async () => {
  const store = createMetricsStore({ metrics: async () => ({ ...reply(1), packetsPerSecond: "x" as unknown as number }) });
  await store.tick();
  assert.equal(store.current.value.packetsPerSecond, 0);
});

test("flows analysed a second come from two replies' flows_processed and server timestamps", async () => {
  const at = (t: number, flows: unknown) => ({ ...reply(1), timestamp: t, flows_processed: flows }) as MetricsReply;
  assert.equal(analysedPerSecond(null, at(10, 100)), null);
  assert.equal(analysedPerSecond(at(10, 100), at(12, 600)), 250);
  assert.equal(analysedPerSecond(at(10, 100), at(10, 600)), null); // no time between them
  assert.equal(analysedPerSecond(at(10, 600), at(11, 5)), null); // the appliance restarted: the counter went back
  assert.equal(analysedPerSecond(at(10, "x"), at(11, 5)), null);
  const replies = [at(100, 0), at(101, 40), at(103, 100)];
  const store = createMetricsStore({ metrics: async () => replies.shift()! });
  await store.tick();
  assert.equal(store.analysed.value, null);
  await store.tick();
  assert.equal(store.analysed.value, 40);
  await store.tick();
  assert.equal(store.analysed.value, 30);
});
