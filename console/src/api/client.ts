// The typed API client: the browser's only way to the dashboard (port 3000). Endpoints come from
// endpoints.json, which tests/console/test_api_contract.py checks against the appliance's OpenAPI document.
import ENDPOINTS from "./endpoints.json";

export type EndpointName = Exclude<keyof typeof ENDPOINTS, "_comment">;
type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";

/** An error reply of the dashboard or the appliance: `{error, code?, field?, fields?}` plus the HTTP status. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code?: string,
    readonly fields: Record<string, string> = {},
  ) {
    super(message);
    this.name = "ApiError";
  }

  /** What to tell the user, in words, for this status. */
  get userMessage(): string {
    if (this.status === 0) return `The console cannot reach the server (${this.message}); it keeps retrying.`;
    if (this.status === 401) return "Your session has ended: sign in again.";
    if (this.status === 403) return this.code === "csrf" ? "The page is out of date: reload it." : this.message;
    if (this.status >= 500) return `The appliance failed (${this.status}): ${this.message}. Retry in a moment.`;
    return this.message;
  }
}

export type Role = "admin" | "analyst";
export interface User { username: string; role: Role; disabled?: boolean }
export interface Session { user: User; csrfToken: string }

export type Severity = "Low" | "Medium" | "High" | "Critical";
export type AlertStatus = "New" | "Acknowledged" | "Investigating" | "Resolved" | "FalsePositive";
export interface Detection {
  detector: string; category: string; confidence: number; severity: string | null;
  evidence: Record<string, unknown>; flow_ids: string[]; first_seen: string; last_seen: string;
}
export interface HistoryEntry { at: string; actor: string; from: string; to: string; note?: string | null }
export interface Alert {
  id: string; category: string; confidence: number; severity: Severity; summary: string; status: AlertStatus;
  agent_id: string; indicator: string; first_seen: string; last_seen: string; detection_count: number;
  detections: Detection[]; history?: HistoryEntry[];
}
export interface AlertPage { alerts: Alert[]; count: number; next_cursor?: string | null }
export interface AlertGroup {
  category: string; agent_id: string; indicator: string; count: number; first_seen: string; last_seen: string;
  severity: Severity; alert_ids: string[]; statuses?: Partial<Record<AlertStatus, number>>;
}
export interface AlertGroups { groups: AlertGroup[]; count?: number }
export interface Flow {
  id: string; community_id: string; agent_id: string; state: string; end_reason: string; protocol: number;
  transport: string; local_ip: string; local_port: number; remote_ip: string; remote_port: number; first_seen: string;
  last_seen: string; duration_s: number; packets_out: number; packets_in: number; bytes_out: number; bytes_in: number;
  tcp_flags: number; pid: number; process_name: string; dns_queries: string[];
}
export interface Agent {
  id: string; hostname: string; os: string; version: string; status: string; packets_received: number;
  packets_rejected: number; dropped_by_agent: number; first_seen: string; last_seen: string; remote_address: string;
}
export interface Exclusion {
  id: string; value: string; kind: string; protocol: string; agent_id: string | null; comment: string; created_at: string;
}
export interface Rule { id: string; name?: string; enabled: boolean; file: string; [key: string]: unknown }
export interface SignatureState {
  rules: Rule[]; loaded: number; directory: string; last_error: string | null; reloads: number;
  reload_failures: number; last_reload_at: number | null;
}
export interface EnrollmentToken { token: string; command: string; command_unix: string; expires_at: string }
export interface Certificate {
  fingerprint: string; serial: string; common_name: string; enrolled: boolean; os: string; token_prefix: string;
  issued_at: string | null; not_after: string | null; machine_id: string | null; agent_id: string | null;
  bound_at: string | null; revoked_at: string | null; revoke_reason: string | null;
}
export interface ProcessEvent { [key: string]: unknown }
export interface MetricsReply {
  timestamp: number; totalPackets: number; totalBytes: number; packetsPerSecond: number; bytesPerSecond: number;
  activeThreats: number; captureUptime: number; agents_online?: number; [key: string]: unknown;
}
export interface MetricsHistoryReply { interval_s: number; count: number; entries: MetricsReply[] }

export type Query = Record<string, string | number | boolean | undefined | null>;
export interface CallOptions { params?: Record<string, string>; query?: Query; body?: unknown }

/** Fill `{name}` placeholders (URL-encoded) and append the query string, skipping empty values. */
export function buildPath(template: string, params: Record<string, string> = {}, query: Query = {}): string {
  const path = template.replace(/\{([a-zA-Z_]+)\}/g, (_, name: string) => {
    const value = params[name];
    if (value === undefined) throw new Error(`missing path parameter ${name} for ${template}`);
    return encodeURIComponent(value);
  });
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") search.append(key, String(value));
  }
  const text = search.toString();
  return text ? `${path}?${text}` : path;
}

export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

/** Builds the console's client. `onUnauthorized` runs on every 401 (the router sends the user to sign-in). */
export function createClient(fetchImpl: FetchLike = (i, r) => fetch(i, r), onUnauthorized: () => void = () => {}) {
  let csrfToken = "";

  async function call<T>(name: EndpointName, options: CallOptions = {}): Promise<T> {
    const endpoint = ENDPOINTS[name] as { method: Method; path: string };
    const url = buildPath(endpoint.path, options.params, options.query);
    const headers: Record<string, string> = { Accept: "application/json" };
    if (endpoint.method !== "GET") headers["X-CSRF-Token"] = csrfToken;
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    let response: Response;
    try {
      response = await fetchImpl(url, { method: endpoint.method, headers, body, credentials: "same-origin" });
    } catch (err) {
      throw new ApiError(0, err instanceof Error ? err.message : String(err), "network");
    }
    const text = await response.text();
    let data: unknown = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = { error: text.slice(0, 200) };
      }
    }
    if (!response.ok) {
      const reply = (data ?? {}) as { error?: string; code?: string; field?: string; fields?: Record<string, string> };
      const fields = { ...(reply.fields ?? {}) };
      if (reply.field && !fields[reply.field]) fields[reply.field] = reply.error ?? "invalid";
      if (response.status === 401 && name !== "login" && name !== "me") onUnauthorized();
      throw new ApiError(response.status, reply.error ?? response.statusText ?? "request failed", reply.code, fields);
    }
    return data as T;
  }

  return {
    call,
    setCsrf(token: string) { csrfToken = token; },
    /** The URL of an export of what `query` matches (a plain GET the browser downloads with its cookie). */
    exportUrl(format: "csv" | "json", query: Query): string {
      return buildPath(ENDPOINTS.alertsExport.path, {}, { ...query, format });
    },
    login: (username: string, password: string) => call<Session>("login", { body: { username, password } }),
    logout: () => call<unknown>("logout"),
    me: () => call<Session>("me"),
    changePassword: (current: string, next: string) => call<unknown>("changePassword", { body: { current, new: next } }),
    users: () => call<{ users: User[] }>("users"),
    createUser: (username: string, password: string, role: Role) =>
      call<User>("createUser", { body: { username, password, role } }),
    setUserDisabled: (username: string, disabled: boolean) =>
      call<User>("updateUser", { params: { username }, body: { disabled } }),
    metrics: () => call<MetricsReply>("metrics"),
    metricsHistory: () => call<MetricsHistoryReply>("metricsHistory"),
    alerts: (query: Query) => call<AlertPage>("alerts", { query }),
    alert: (id: string) => call<Alert>("alert", { params: { alert_id: id } }),
    setAlertStatus: (id: string, status: AlertStatus, note?: string) =>
      call<Alert>("alertStatus", { params: { alert_id: id }, body: note ? { status, note } : { status } }),
    alertGroups: (query: Query) => call<AlertGroups>("alertGroups", { query }),
    bulkStatus: (filter: Query, status: AlertStatus, note?: string) =>
      call<{ updated: number }>("alertsBulk", { body: { filter, status, note: note ?? "" } }),
    flows: (query: Query) => call<{ flows: Flow[]; count: number }>("flows", { query }),
    agents: () => call<{ agents: Agent[]; count: number }>("agents"),
    agent: (id: string) => call<Agent>("agent", { params: { agent_id: id } }),
    agentEvents: (id: string, kind: "processes" | "files", limit = 500) =>
      call<{ events: ProcessEvent[]; count: number }>("agentEvents", { params: { agent_id: id }, query: { kind, limit } }),
    revokeAgent: (id: string) => call<{ revoked: number }>("revokeAgent", { params: { agent_id: id } }),
    exclusions: () => call<{ entries: Exclusion[]; count: number; scopes: string[] }>("exclusions"),
    addExclusion: (body: { value: string; protocol: string; agent_id?: string | null; comment?: string }) =>
      call<Exclusion>("addExclusion", { body }),
    deleteExclusion: (id: string) => call<unknown>("deleteExclusion", { params: { entry_id: id } }),
    signatures: () => call<SignatureState>("signatures"),
    saveSignature: (rule: unknown) => call<{ rule: Rule }>("saveSignature", { body: rule }),
    validateSignature: (rule: unknown) => call<{ valid: boolean }>("validateSignature", { body: rule }),
    toggleSignature: (id: string, enabled: boolean) =>
      call<{ rule: Rule }>("toggleSignature", { params: { rule_id: id }, body: { enabled } }),
    reloadSignatures: () => call<SignatureState>("reloadSignatures"),
    createEnrollmentToken: () => call<EnrollmentToken>("createEnrollmentToken", { body: {} }),
    certificates: () => call<{ certificates: Certificate[]; count: number }>("certificates"),
  };
}

export type ApiClient = ReturnType<typeof createClient>;
