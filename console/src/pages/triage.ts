// Triage transitions as the appliance allows them (appliance/detection/alerts.py TRANSITIONS). The API
// enforces them; the console only uses them to offer the buttons that can succeed.
import type { AlertGroup, AlertStatus } from "../api/client.ts";

export const TRANSITIONS: Record<AlertStatus, AlertStatus[]> = {
  New: ["Acknowledged", "Investigating", "Resolved", "FalsePositive"],
  Acknowledged: ["Investigating", "Resolved", "FalsePositive"],
  Investigating: ["Acknowledged", "Resolved", "FalsePositive"],
  Resolved: ["New"],
  FalsePositive: ["New"],
};

/** The statuses at least one alert of `groups` may move to (a group without `statuses` allows every one). */
export function allowedActions(groups: AlertGroup[]): Set<AlertStatus> {
  const allowed = new Set<AlertStatus>();
  for (const g of groups) {
    const statuses = g.statuses;
    const present = statuses
      ? (Object.keys(statuses) as AlertStatus[]).filter((s) => (statuses[s] ?? 0) > 0)
      : (Object.keys(TRANSITIONS) as AlertStatus[]);
    for (const s of present) for (const next of TRANSITIONS[s] ?? []) allowed.add(next);
  }
  return allowed;
}
