// The alert inbox (EveBox model): groups by category + agent + indicator; views Inbox (New), Escalated
// (Investigating), All; filters with click-to-include / click-to-exclude; triage and bulk actions that apply
// to everything the query matches (server side); keyboard j/k/x/e/s/?; export; auto-refresh.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import type { Alert, AlertGroup, AlertStatus, Query } from "../api/client.ts";
import { allowedActions } from "./triage.ts";
import { CopyButton, ErrorNote, Page, SeverityBadge, fmtTime, navigate, route, usePoll } from "../components/ui.tsx";

type View = "inbox" | "escalated" | "all";
const PAGE_SIZE = 25;
const VIEWS: { id: View; label: string; status?: AlertStatus }[] = [
  { id: "inbox", label: "Inbox", status: "New" },
  { id: "escalated", label: "Escalated", status: "Investigating" },
  { id: "all", label: "All" },
];
const FILTER_FIELDS = ["severity", "category", "agent_id", "indicator", "status"] as const;
const RANGES = [["", "Any time"], ["-15m", "Last 15 minutes"], ["-1h", "Last hour"], ["-24h", "Last 24 hours"],
                ["-7d", "Last 7 days"], ["custom", "Between…"]] as const;
/** Triage actions offered on groups; the server applies the transitions it allows and counts the rest as skipped. */
const ACTIONS: { status: AlertStatus; label: string; key?: string }[] = [
  { status: "Acknowledged", label: "Acknowledge", key: "e" },
  { status: "Investigating", label: "Escalate", key: "s" },
  { status: "Resolved", label: "Resolve" },
  { status: "FalsePositive", label: "False positive" },
  { status: "New", label: "Reopen" },
];


function groupKey(g: AlertGroup): string { return `${g.category}|${g.agent_id}|${g.indicator}`; }

function initialFilters(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of route.value.query) {
    if ((FILTER_FIELDS as readonly string[]).includes(k.replace(/^not_/, ""))) out[k] = v;
  }
  return out;
}

export function Alerts({ ctx }: PageProps) {
  const [view, setView] = useState<View>((route.value.query.get("view") as View) || "inbox");
  const [filters, setFilters] = useState<Record<string, string>>(initialFilters);
  const [range, setRange] = useState("");
  const [since, setSince] = useState("");
  const [until, setUntil] = useState("");
  const [groups, setGroups] = useState<AlertGroup[]>([]);
  const [loaded, setLoaded] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [cursor, setCursor] = useState(0);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [note, setNote] = useState("");
  const [message, setMessage] = useState("");
  const [autoRefresh, setAutoRefresh] = useState(true);
  const [help, setHelp] = useState(false);
  const [tick, setTick] = useState(0);
  const [expanded, setExpanded] = useState<string | null>(null);

  const query: Query = useMemo(() => {
    const q: Query = { ...filters };
    const status = VIEWS.find((v) => v.id === view)?.status;
    if (status && !q.status) q.status = status;
    if (range === "custom") {
      if (since) q.since = new Date(since).toISOString();
      if (until) q.until = new Date(until).toISOString();
    } else if (range) {
      q.since = range;
    }
    return q;
  }, [filters, view, range, since, until]);

  const load = async () => {
    try {
      const reply = await ctx.api.alertGroups({ ...query, limit: 500 });
      setGroups(reply.groups);
      setError(null);
    } catch (err) {
      setError(err);
    } finally {
      setLoaded(true);
    }
  };
  usePoll(async () => { if (autoRefresh || tick >= 0) await load(); }, autoRefresh ? 10000 : 3_600_000, [query, autoRefresh, tick]);
  useEffect(() => { setCursor(0); setSelected(new Set()); }, [query]);

  const total = groups.reduce((n, g) => n + g.count, 0);
  const current = groups[Math.min(cursor, groups.length - 1)];
  const selectedGroups = groups.filter((g) => selected.has(groupKey(g)));
  const allowed = allowedActions(selectedGroups.length ? selectedGroups : current ? [current] : []);

  const include = (field: string, value: string) => setFilters((f) => { const n = { ...f, [field]: value }; delete n[`not_${field}`]; return n; });
  const exclude = (field: string, value: string) => setFilters((f) => { const n = { ...f, [`not_${field}`]: value }; delete n[field]; return n; });
  const removeFilter = (key: string) => setFilters((f) => { const n = { ...f }; delete n[key]; return n; });

  async function apply(status: AlertStatus, targets: AlertGroup[] | "all") {
    setMessage("");
    try {
      let matched = 0, changed = 0, skipped = 0;
      const filtersToRun: Query[] = targets === "all"
        ? [query]
        : targets.map((g) => ({ ...query, category: g.category, agent_id: g.agent_id, indicator: g.indicator }));
      for (const filter of filtersToRun) {
        const empty = Object.values(filter).every((v) => v === undefined || v === "");
        const reply = await ctx.api.call<{ matched: number; changed: number; skipped: number }>("alertsBulk", {
          body: { filter, status, note: note || undefined, ...(empty ? { all: true } : {}) } });
        matched += reply.matched; changed += reply.changed; skipped += reply.skipped;
      }
      setMessage(`${status}: ${changed} of ${matched} alerts changed` + (skipped ? `, ${skipped} skipped (transition not allowed)` : "") + ".");
      setNote("");
      setSelected(new Set());
      setTick((t) => t + 1);
    } catch (err) {
      setError(err);
    }
  }

  const targets = (): AlertGroup[] => {
    const sel = groups.filter((g) => selected.has(groupKey(g)));
    return sel.length ? sel : current ? [current] : [];
  };

  // The keys act on what the handler itself last set, not on the last render's closure: Preact renders (and runs
  // effects) after the key events, so "j" then "x" typed fast would otherwise select the row above the cursor.
  // Each render refreshes the ref from state; the handler writes it before it asks for the render.
  const keys = useRef({ cursor, selected, groups, apply });
  keys.current = { cursor, selected, groups, apply };
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      const t = e.target as HTMLElement;
      if (e.ctrlKey || e.metaKey || e.altKey || ["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName)) return;
      const k = keys.current;
      const at = k.groups[Math.min(k.cursor, k.groups.length - 1)];
      const moveTo = (c: number) => { k.cursor = c; setCursor(c); };
      const chosen = (): AlertGroup[] => {
        const sel = k.groups.filter((g) => k.selected.has(groupKey(g)));
        return sel.length ? sel : at ? [at] : [];
      };
      if (e.key === "j") moveTo(Math.min(k.cursor + 1, Math.max(0, k.groups.length - 1)));
      else if (e.key === "k") moveTo(Math.max(k.cursor - 1, 0));
      else if (e.key === "x" && at) {
        const n = new Set(k.selected); const key = groupKey(at);
        if (n.has(key)) n.delete(key); else n.add(key);
        k.selected = n; setSelected(n);
      } else if (e.key === "e") void k.apply("Acknowledged", chosen());
      else if (e.key === "s") void k.apply("Investigating", chosen());
      else if (e.key === "?") setHelp((h) => !h);
      else if ((e.key === "Enter" || e.key === "o") && at && t.tagName !== "BUTTON" && t.tagName !== "A") navigate(`/alerts/${at.alert_ids[0]}`);
      else if (e.key === "Escape") setHelp(false);
      else return;
      e.preventDefault();
    };
    addEventListener("keydown", onKey);
    return () => removeEventListener("keydown", onKey);
  }, []);

  useEffect(() => {
    document.querySelector<HTMLElement>(`tr[data-row="${cursor}"]`)?.scrollIntoView({ block: "nearest" });
  }, [cursor]);

  const cell = (field: string, value: string, shown = value) => (
    <span class="facet">
      <button type="button" class="link" title={`Show only ${field} ${value}`} aria-label={`Filter on ${field} ${value}`}
              onClick={() => include(field, value)}>{shown}</button>
      <button type="button" class="not" title={`Exclude ${field} ${value}`} aria-label={`Exclude ${field} ${value}`}
              onClick={() => exclude(field, value)}>−</button>
    </span>
  );

  return (
    <Page title="Alerts" actions={<button type="button" onClick={() => setHelp(true)} aria-haspopup="dialog">Keyboard help (?)</button>}>
      <div class="toolbar">
        <div role="tablist" aria-label="Views" class="toolbar">
          {VIEWS.map((v) => (
            <button key={v.id} type="button" role="tab" aria-selected={view === v.id} class={view === v.id ? "active" : ""}
                    onClick={() => setView(v.id)}>{v.label}</button>
          ))}
        </div>
        <label class="inline">Time range{" "}
          <select value={range} onChange={(e) => setRange(e.currentTarget.value)}>
            {RANGES.map(([value, label]) => <option key={value} value={value}>{label}</option>)}
          </select>
        </label>
        {range === "custom" && <>
          <label class="inline">From <input type="datetime-local" value={since} onInput={(e) => setSince(e.currentTarget.value)} /></label>
          <label class="inline">To <input type="datetime-local" value={until} onInput={(e) => setUntil(e.currentTarget.value)} /></label>
        </>}
        <label class="inline"><input type="checkbox" checked={autoRefresh} onChange={(e) => setAutoRefresh(e.currentTarget.checked)} /> Auto-refresh</label>
        <a class="button" href={ctx.api.exportUrl("csv", query)} download="alerts.csv">Export CSV</a>
        <a class="button" href={ctx.api.exportUrl("json", query)} download="alerts.json">Export JSON</a>
      </div>
      <div class="chips" role="group" aria-label="Active filters">
        {Object.entries(filters).map(([k, v]) => (
          <span class="chip" key={k}>{k.startsWith("not_") ? `not ${k.slice(4)}` : k} = {v}
            <button type="button" aria-label={`Remove filter ${k} ${v}`} onClick={() => removeFilter(k)}>×</button></span>
        ))}
      </div>
      <ErrorNote error={error} retry={() => setTick((t) => t + 1)} />
      <div class="toolbar">
        <label class="inline">Note for the next action <input value={note} maxLength={1000} onInput={(e) => setNote(e.currentTarget.value)} /></label>
        {ACTIONS.map((a) => (
          <button key={a.status} type="button" disabled={!allowed.has(a.status)} onClick={() => apply(a.status, targets())}>
            {a.label}{a.key ? ` (${a.key})` : ""}{selected.size ? ` ${selected.size} selected` : ""}</button>
        ))}
        <button type="button" disabled={!groups.length} onClick={() => apply("Acknowledged", "all")}>
          Acknowledge all {total} matching</button>
      </div>
      <p role="status" class="muted">{message}</p>
      <table class="inbox" aria-label="Alert groups">
        <thead><tr><th scope="col"><span class="sr-only">Selected</span></th><th scope="col">Severity</th><th scope="col">Count</th>
          <th scope="col">Category</th><th scope="col">Agent</th><th scope="col">Indicator</th><th scope="col">Status</th>
          <th scope="col">First seen</th><th scope="col">Last seen</th><th scope="col">Open</th></tr></thead>
        <tbody>
          {groups.map((g, i) => {
            const key = groupKey(g);
            return [
              <tr key={key} data-row={i} class={i === cursor ? "cursor" : ""} aria-selected={selected.has(key)}>
                <td><input type="checkbox" aria-label={`Select ${g.category} ${g.indicator}`} checked={selected.has(key)}
                           onChange={() => setSelected((s) => { const n = new Set(s); if (n.has(key)) n.delete(key); else n.add(key); return n; })} /></td>
                <td>{cell("severity", g.severity, "")}<SeverityBadge severity={g.severity} /></td>
                <td>{g.count}</td>
                <td>{cell("category", g.category)}</td>
                <td>{cell("agent_id", g.agent_id, g.agent_id.slice(0, 8))}</td>
                <td class="wrap">{cell("indicator", g.indicator)}</td>
                <td>{Object.entries(g.statuses ?? {})
                  .filter(([, n]) => n > 0).map(([s, n]) => `${s} ${n}`).join(", ")}</td>
                <td>{fmtTime(g.first_seen)}</td>
                <td>{fmtTime(g.last_seen)}</td>
                <td><a href={`#/alerts/${encodeURIComponent(g.alert_ids[0])}`}>Open</a>{" "}
                  <button type="button" class="link" aria-expanded={expanded === key} aria-label={`List the alerts of ${g.category} ${g.indicator}`}
                          onClick={() => setExpanded(expanded === key ? null : key)}>{expanded === key ? "Hide" : "List"}</button></td>
              </tr>,
              expanded === key && (
                <tr key={`${key}-alerts`} class="expanded"><td colSpan={10}>
                  <GroupAlerts ctx={ctx} query={{ ...query, category: g.category, agent_id: g.agent_id, indicator: g.indicator }} />
                </td></tr>
              ),
            ];
          })}
          {loaded && !groups.length && !error && <tr><td colSpan={10} class="muted">No alerts match.</td></tr>}
        </tbody>
      </table>
      {help && (
        <div class="dialog" role="dialog" aria-modal="true" aria-labelledby="help-title">
          <h2 id="help-title">Keyboard shortcuts</h2>
          <dl>
            <dt>j / k</dt><dd>next / previous group</dd><dt>x</dt><dd>select the group</dd>
            <dt>e</dt><dd>acknowledge the selected groups (or the current one)</dd>
            <dt>s</dt><dd>escalate (Investigating)</dd><dt>Enter or o</dt><dd>open the newest alert of the group</dd>
            <dt>?</dt><dd>this help</dd>
          </dl>
          <p class="muted">Export URL of the current query: <code>{ctx.api.exportUrl("csv", query)}</code>{" "}
            <CopyButton text={location.origin + ctx.api.exportUrl("csv", query)} label="Copy the export URL" /></p>
          <button type="button" autoFocus onClick={() => setHelp(false)}>Close</button>
        </div>
      )}
    </Page>
  );
}

/** The alerts of one group, newest first, a page at a time with the API's cursor. */
function GroupAlerts({ ctx, query }: { ctx: PageProps["ctx"]; query: Query }) {
  const [alerts, setAlerts] = useState<Alert[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [total, setTotal] = useState<number | null>(null);
  const [error, setError] = useState<unknown>(null);
  const fetchPage = async (from: string | null) => {
    try {
      const page = await ctx.api.alerts({ ...query, limit: PAGE_SIZE, cursor: from ?? undefined });
      setAlerts((prev) => (from ? [...prev, ...page.alerts] : page.alerts));
      setCursor(page.next_cursor ?? null);
      setTotal((page as { total?: number }).total ?? null);
      setError(null);
    } catch (err) { setError(err); }
  };
  useEffect(() => { void fetchPage(null); }, [JSON.stringify(query)]);
  return (
    <div>
      <ErrorNote error={error} retry={() => fetchPage(null)} />
      <ul class="group-alerts">
        {alerts.map((a) => (
          <li key={a.id}><a href={`#/alerts/${encodeURIComponent(a.id)}`}>{fmtTime(a.last_seen)} {a.status}</a> {a.summary}</li>
        ))}
      </ul>
      <p class="muted">{alerts.length}{total !== null ? ` of ${total}` : ""} alerts{" "}
        {cursor && <button type="button" onClick={() => fetchPage(cursor)}>Load more</button>}</p>
    </div>
  );
}
