// Small shared pieces: the hash router, polling, error notes in words, and formatting.
import { signal } from "@preact/signals";
import { useEffect, useRef, useState } from "preact/hooks";
import type { ComponentChildren } from "preact";
import { ApiError } from "../api/client.ts";

/** The current route: `#/alerts/abc?x=1` -> {path: "/alerts/abc", query}. Client state. */
function readHash() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, search = ""] = raw.split("?", 2);
  return { path, query: new URLSearchParams(search) };
}
export const route = signal(readHash());
addEventListener("hashchange", () => { route.value = readHash(); });
export function navigate(to: string): void { location.hash = to; }

/** Run `fn` now and every `ms` while mounted; a failure never stops the polling (the appliance may restart). */
export function usePoll(fn: () => Promise<unknown>, ms: number, deps: unknown[] = []): void {
  const saved = useRef(fn);
  saved.current = fn;
  useEffect(() => {
    let alive = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const loop = async () => {
      try { await saved.current(); } catch { /* shown by the caller; keep polling */ }
      if (alive) timer = setTimeout(loop, ms);
    };
    void loop();
    return () => { alive = false; clearTimeout(timer); };
  }, deps);
}

export function errorText(err: unknown): string {
  return err instanceof ApiError ? err.userMessage : err instanceof Error ? err.message : String(err);
}

/** An API error where the user acted: 5xx and network errors offer a retry. */
export function ErrorNote({ error, retry }: { error: unknown; retry?: () => void }) {
  if (!error) return null;
  const status = error instanceof ApiError ? error.status : 0;
  return (
    <div class="error" role="alert">
      <span>{errorText(error)}</span>
      {retry && (status === 0 || status >= 500) && <button type="button" onClick={retry}>Retry</button>}
    </div>
  );
}

/** Load once (and on deps change); returns [data, error, reload]. */
export function useLoad<T>(fn: () => Promise<T>, deps: unknown[] = []): [T | null, unknown, () => void] {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [n, setN] = useState(0);
  useEffect(() => {
    let alive = true;
    fn().then((d) => { if (alive) { setData(d); setError(null); } }, (e) => { if (alive) setError(e); });
    return () => { alive = false; };
  }, [...deps, n]);
  return [data, error, () => setN((x) => x + 1)];
}

export function Page({ title, children, actions }: { title: string; children: ComponentChildren; actions?: ComponentChildren }) {
  useEffect(() => { document.title = `${title} · Sensor console`; }, [title]);
  return (
    <section class="page" aria-labelledby="page-title">
      <header class="page-head"><h1 id="page-title">{title}</h1>{actions}</header>
      {children}
    </section>
  );
}

export function fmtNumber(n: number): string {
  if (!Number.isFinite(n)) return "0";
  const units = ["", "k", "M", "G", "T"];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${i === 0 ? Math.round(n) : n.toFixed(1)}${units[i]}`;
}
export function fmtBytes(n: number): string {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i === 0 ? Math.round(n) : n.toFixed(1)} ${units[i]}`;
}
export function fmtTime(iso: string | number | null | undefined): string {
  if (iso === null || iso === undefined || iso === "") return "—";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function SeverityBadge({ severity }: { severity: string }) {
  return <span class={`sev sev-${severity.toLowerCase()}`}>{severity}</span>;
}

/** Copy text with the Clipboard API, falling back to a selected textarea; says what happened. */
export function CopyButton({ text, label }: { text: string; label: string }) {
  const [done, setDone] = useState("");
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setDone("Copied");
    } catch {
      setDone("Select the text and copy it (the browser refused the clipboard)");
    }
  };
  return (
    <span>
      <button type="button" onClick={copy} aria-label={label}>Copy</button>
      <span role="status" class="muted"> {done}</span>
    </span>
  );
}
