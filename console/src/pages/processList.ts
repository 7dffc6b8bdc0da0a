// Folds an agent's process stream (start/exit events, newest first from the API) into one row per process.

export interface ProcessEventIn {
  kind?: string; timestamp_ms?: number; pid?: number; ppid?: number; name?: string; path?: string;
  command_line?: string; user?: string; exit_code?: number;
}
export interface ProcessRow {
  pid: number; ppid: number; name: string; path: string; commandLine: string; user: string;
  startedMs: number | null; exitedMs: number | null; exitCode: number | null;
}

/** One row per process (pid, reused pids split at each start); an exit without a seen start still makes a row
 *  so that evidence never disappears. Rows are newest first. */
export function foldProcesses(events: ProcessEventIn[]): ProcessRow[] {
  const ordered = [...events].sort((a, b) => (a.timestamp_ms ?? 0) - (b.timestamp_ms ?? 0));
  const open = new Map<number, ProcessRow>();
  const rows: ProcessRow[] = [];
  for (const e of ordered) {
    const pid = e.pid ?? 0;
    if (e.kind === "start" || !open.has(pid)) {
      const row: ProcessRow = { pid, ppid: e.ppid ?? 0, name: e.name ?? "", path: e.path ?? "",
                                commandLine: e.command_line ?? "", user: e.user ?? "",
                                startedMs: e.kind === "start" ? e.timestamp_ms ?? null : null, exitedMs: null, exitCode: null };
      rows.push(row);
      open.set(pid, row);
    }
    if (e.kind === "exit") {
      const row = open.get(pid)!;
      row.exitedMs = e.timestamp_ms ?? null;
      row.exitCode = e.exit_code ?? null;
      row.name ||= e.name ?? "";
      open.delete(pid);
    }
  }
  return rows.reverse();
}
