import { test } from "node:test";
import assert from "node:assert/strict";
import { foldProcesses } from "../src/pages/processList.ts";
import { lineOf, locateProblems } from "../src/pages/ruleLines.ts";

test("start and exit of one pid fold into one terminated row; a running one stays open; newest first", () => {
  const rows = foldProcesses([
    { kind: "exit", timestamp_ms: 30, pid: 10, exit_code: 3, name: "curl" },
    { kind: "start", timestamp_ms: 20, pid: 11, name: "sh", command_line: "sh -c x", user: "bob" },
    { kind: "start", timestamp_ms: 10, pid: 10, name: "curl", ppid: 1 },
  ]);
  assert.deepEqual(rows.map((r) => [r.pid, r.startedMs, r.exitedMs, r.exitCode]), [[11, 20, null, null], [10, 10, 30, 3]]);
  assert.equal(rows[0].commandLine, "sh -c x");
});

test("a reused pid gets a new row at its new start; an exit without a start still shows", () => {
  const rows = foldProcesses([
    { kind: "start", timestamp_ms: 1, pid: 5, name: "a" }, { kind: "exit", timestamp_ms: 2, pid: 5 },
    { kind: "start", timestamp_ms: 3, pid: 5, name: "b" }, { kind: "exit", timestamp_ms: 4, pid: 9, name: "lost" },
  ]);
  assert.deepEqual(rows.map((r) => [r.pid, r.name, r.exitedMs]), [[9, "lost", 4], [5, "b", null], [5, "a", 2]]);
});

const RULE = `id: X
severity: Medium
conditions:
  - field: dns.qname
    op: regex
    value: a
  - field: dns.qtype
    op: bigger
    value: 1
`;

test("rule problems land on the line of the field they name", () => {
  assert.equal(lineOf(RULE, "severity"), 2);
  assert.equal(lineOf(RULE, "conditions"), 3);
  assert.equal(lineOf(RULE, "conditions[0].op"), 5);
  assert.equal(lineOf(RULE, "conditions[1].op"), 8);
  assert.equal(lineOf(RULE, "conditions[1].field"), 7);
  assert.equal(lineOf(RULE, "nothing"), null);
  assert.deepEqual(locateProblems(RULE, "rule: conditions[1].op: unknown operator 'bigger'; rule: <root>: bad"),
                   [{ line: 8, message: "conditions[1].op: unknown operator 'bigger'" }, { line: null, message: "<root>: bad" }]);
});

test("group actions offer only transitions some alert of the groups can make", async () => {
  const { allowedActions } = await import("../src/pages/triage.ts");
  const group = (statuses: Record<string, number>) => ({ category: "c", agent_id: "a", indicator: "i", count: 1,
    first_seen: "", last_seen: "", severity: "Low" as const, alert_ids: ["x"], statuses });
  assert.deepEqual([...allowedActions([group({ Resolved: 2, New: 0 })])], ["New"]);
  assert.deepEqual([...allowedActions([group({ Investigating: 1 })])].sort(), ["Acknowledged", "FalsePositive", "Resolved"]);
  assert.equal(allowedActions([]).size, 0);
  assert.equal(allowedActions([group({ New: 1 }), group({ FalsePositive: 1 })]).size, 5);
});
