// What every page receives from the composition root (main.tsx): the API client, the four stores, the session.
import type { Signal } from "@preact/signals";
import type { ApiClient, Session } from "./api/client.ts";
import type { MetricsStore } from "./stores/metrics.ts";
import type { ThreatsStore } from "./stores/threats.ts";
import type { CaptureStore } from "./stores/capture.ts";
import type { ConfigStore } from "./stores/config.ts";

export interface Ctx {
  api: ApiClient;
  session: Signal<Session | null>;
  metrics: MetricsStore;
  threats: ThreatsStore;
  capture: CaptureStore;
  config: ConfigStore;
}
export interface PageProps { ctx: Ctx; id?: string }
