// The composition root of the console: builds the client and the four stores once and hands them down.
import { render } from "preact";
import { signal } from "@preact/signals";
import { createClient } from "./api/client.ts";
import type { Session } from "./api/client.ts";
import { createMetricsStore } from "./stores/metrics.ts";
import { createThreatsStore } from "./stores/threats.ts";
import { createCaptureStore } from "./stores/capture.ts";
import { createConfigStore } from "./stores/config.ts";
import { App } from "./App.tsx";
import type { Ctx } from "./context.ts";
import "./styles.css";

const session = signal<Session | null>(null);
const api = createClient(undefined, () => { session.value = null; });
const ctx: Ctx = {
  api, session,
  metrics: createMetricsStore(api),
  threats: createThreatsStore(api),
  capture: createCaptureStore(api),
  config: createConfigStore(api),
};
render(<App ctx={ctx} />, document.getElementById("app")!);
