import { test } from "node:test";
import assert from "node:assert/strict";
import { ApiError, buildPath, createClient } from "../src/api/client.ts";

test("buildPath encodes parameters and drops empty query values", () => {
  assert.equal(buildPath("/api/v1/alerts/{alert_id}", { alert_id: "a/b?c" }), "/api/v1/alerts/a%2Fb%3Fc");
  assert.equal(buildPath("/x", {}, { a: "1", b: "", c: undefined, d: null, e: 0 }), "/x?a=1&e=0");
  assert.throws(() => buildPath("/a/{id}"), /missing path parameter id/);
});

test("mutations carry the CSRF token, reads do not; errors become ApiError with field messages", async () => {
  const seen: [string, RequestInit][] = [];
  let unauthorized = 0;
  const client = createClient(async (url, init) => {
    seen.push([url, init]);
    if (url.startsWith("/api/v1/whitelist")) {
      return new Response(JSON.stringify({ error: "value: not an IP", field: "value" }), { status: 422 });
    }
    if (url === "/api/v1/metrics") return new Response(JSON.stringify({ error: "no session" }), { status: 401 });
    return new Response("{}", { status: 200 });
  }, () => unauthorized++);
  client.setCsrf("tok123");
  await client.alert("abc");
  assert.equal((seen[0][1].headers as Record<string, string>)["X-CSRF-Token"], undefined);
  const err = await client.addExclusion({ value: "x", protocol: "any" }).catch((e) => e);
  assert.ok(err instanceof ApiError);
  assert.equal(err.status, 422);
  assert.deepEqual(err.fields, { value: "value: not an IP" });
  assert.equal((seen[1][1].headers as Record<string, string>)["X-CSRF-Token"], "tok123");
  await client.metrics().catch(() => undefined);
  assert.equal(unauthorized, 1);
});

test("a network failure is an ApiError with status 0 that says it keeps retrying", async () => {
  const client = createClient(async () => { throw new TypeError("Failed to fetch"); });
  const err = await client.metrics().catch((e) => e);
  assert.equal(err.status, 0);
  assert.match(err.userMessage, /keeps retrying/);
});
