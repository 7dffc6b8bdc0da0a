// The `config` store: the console settings (general, capture, detection, storage), persisted through
// GET/PUT /api/v1/settings. Each update takes a partial and sends only that section's partial; on refusal
// keeps what the server has and exposes the API's field messages (422 `fields`).
import { signal } from "@preact/signals";
import { ApiError } from "../api/client.ts";
import type { CallOptions, EndpointName } from "../api/client.ts";

export type DetectionLayerName = "network" | "dns" | "http" | "tls" | "behavioral";
export interface GeneralSettings { autoStart: boolean; notifications: boolean; darkMode: boolean }
export interface CaptureSettings { maxPacketSize: number; promiscuousMode: boolean; bufferSize: number }
export interface DetectionSettings {
  sensitivityLevel: "low" | "medium" | "high"; enabledLayers: DetectionLayerName[]; autoBlock: boolean;
}
export interface StorageSettings { retentionDays: number; maxStorageGb: number; exportFormat: "csv" | "json" }
export interface Settings {
  general: GeneralSettings; capture: CaptureSettings; detection: DetectionSettings; storage: StorageSettings;
}
export type Section = keyof Settings;
export interface SettingsSource { call<T>(name: EndpointName, options?: CallOptions): Promise<T> }

export function createConfigStore(source: SettingsSource) {
  const settings = signal<Settings | null>(null);
  const fieldErrors = signal<Record<string, string>>({});
  const error = signal<string | null>(null);
  const saving = signal(false);

  async function load(): Promise<void> {
    try {
      settings.value = await source.call<Settings>("settings");
      error.value = null;
    } catch (err) {
      error.value = err instanceof ApiError ? err.userMessage : String(err);
    }
  }

  async function update<S extends Section>(section: S, partial: Partial<Settings[S]>): Promise<boolean> {
    const base = settings.value;
    if (!base) {
      error.value = "Settings are not loaded yet.";
      return false;
    }
    saving.value = true;
    try {
      // The API takes any subset of sections, each a partial, and replies the whole document.
      settings.value = await source.call<Settings>("saveSettings", { body: { [section]: partial } });
      fieldErrors.value = {};
      error.value = null;
      return true;
    } catch (err) {
      if (err instanceof ApiError) {
        fieldErrors.value = err.fields;
        error.value = err.userMessage;
      } else {
        error.value = String(err);
      }
      return false;
    } finally {
      saving.value = false;
    }
  }

  return {
    settings, fieldErrors, error, saving, load,
    updateGeneral: (p: Partial<GeneralSettings>) => update("general", p),
    updateCapture: (p: Partial<CaptureSettings>) => update("capture", p),
    updateDetection: (p: Partial<DetectionSettings>) => update("detection", p),
    updateStorage: (p: Partial<StorageSettings>) => update("storage", p),
  };
}

export type ConfigStore = ReturnType<typeof createConfigStore>;
