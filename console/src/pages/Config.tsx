// Console settings (the `config` store: general, capture, detection, storage) with the API's messages per
// field, and the analysis config document (validated by the appliance).
import { useEffect, useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import type { Settings } from "../stores/config.ts";
import { ApiError } from "../api/client.ts";
import { ErrorNote, Page, errorText, useLoad } from "../components/ui.tsx";

const LAYERS = ["network", "dns", "http", "tls", "behavioral"] as const;

export function Config({ ctx }: PageProps) {
  const store = ctx.config;
  const [draft, setDraft] = useState<Settings | null>(null);
  const [message, setMessage] = useState("");
  useEffect(() => { void store.load().then(() => setDraft(store.settings.value)); }, []);

  const [analysis, analysisError, reloadAnalysis] = useLoad(() => ctx.api.call<unknown>("analysisConfig"));
  const [analysisText, setAnalysisText] = useState("");
  const [analysisMsg, setAnalysisMsg] = useState("");
  useEffect(() => { if (analysis) setAnalysisText(JSON.stringify(analysis, null, 2)); }, [analysis]);

  const errs = store.fieldErrors.value;
  const fieldError = (name: string) => errs[name] ? <p class="field-error" id={`err-${name}`}>{errs[name]}</p> : null;
  const save = async (section: keyof Settings) => {
    if (!draft) return;
    const ok = await ({ general: store.updateGeneral, capture: store.updateCapture, detection: store.updateDetection,
                        storage: store.updateStorage }[section] as (p: object) => Promise<boolean>)(draft[section]);
    setMessage(ok ? `Saved ${section}.` : "");
    if (ok) setDraft(store.settings.value);
  };
  const saveAnalysis = async () => {
    try {
      const doc = JSON.parse(analysisText);
      await ctx.api.call("saveAnalysisConfig", { body: doc });
      setAnalysisMsg("Analysis config saved.");
      reloadAnalysis();
    } catch (err) {
      setAnalysisMsg(err instanceof ApiError ? `${err.message}${err.fields && Object.keys(err.fields).length ? ` (${Object.entries(err.fields).map(([k, v]) => `${k}: ${v}`).join("; ")})` : ""}` : errorText(err));
    }
  };
  const set = <S extends keyof Settings>(section: S, patch: Partial<Settings[S]>) =>
    setDraft((d) => (d ? { ...d, [section]: { ...d[section], ...patch } } : d));
  const num = (v: string) => (v === "" ? NaN : Number(v));

  return (
    <Page title="Config">
      {store.error.value && <div class="error" role="alert">{store.error.value}</div>}
      <p role="status" class="muted">{message}</p>
      {draft && <div class="grid2">
        <fieldset class="panel"><legend>General</legend>
          {(["autoStart", "notifications", "darkMode"] as const).map((k) => (
            <label class="inline" key={k}><input type="checkbox" checked={draft.general[k]} onChange={(e) => set("general", { [k]: e.currentTarget.checked })} /> {k}</label>))}
          <button type="button" onClick={() => save("general")}>Save general</button>
        </fieldset>
        <fieldset class="panel"><legend>Capture</legend>
          <label for="c-mps">Max packet size (bytes)</label>
          <input id="c-mps" type="number" value={draft.capture.maxPacketSize} aria-invalid={!!errs["capture.maxPacketSize"]} onInput={(e) => set("capture", { maxPacketSize: num(e.currentTarget.value) })} />
          {fieldError("capture.maxPacketSize")}
          <label for="c-buf">Buffer size</label>
          <input id="c-buf" type="number" value={draft.capture.bufferSize} aria-invalid={!!errs["capture.bufferSize"]} onInput={(e) => set("capture", { bufferSize: num(e.currentTarget.value) })} />
          {fieldError("capture.bufferSize")}
          <label class="inline"><input type="checkbox" checked={draft.capture.promiscuousMode} onChange={(e) => set("capture", { promiscuousMode: e.currentTarget.checked })} /> Promiscuous mode</label>
          <button type="button" onClick={() => save("capture")}>Save capture</button>
        </fieldset>
        <fieldset class="panel"><legend>Detection</legend>
          <label for="d-sens">Sensitivity</label>
          <select id="d-sens" value={draft.detection.sensitivityLevel} onChange={(e) => set("detection", { sensitivityLevel: e.currentTarget.value as "low" })}>
            <option value="low">low</option><option value="medium">medium</option><option value="high">high</option>
          </select>
          {fieldError("detection.sensitivityLevel")}
          <p>Enabled layers</p>
          {LAYERS.map((l) => (
            <label class="inline" key={l}><input type="checkbox" checked={draft.detection.enabledLayers.includes(l)} onChange={(e) => set("detection", {
              enabledLayers: e.currentTarget.checked ? [...draft.detection.enabledLayers, l] : draft.detection.enabledLayers.filter((x) => x !== l) })} /> {l}</label>))}
          {fieldError("detection.enabledLayers")}
          <label class="inline"><input type="checkbox" checked={draft.detection.autoBlock} onChange={(e) => set("detection", { autoBlock: e.currentTarget.checked })} /> Auto-block</label>
          {fieldError("detection.autoBlock")}
          <button type="button" onClick={() => save("detection")}>Save detection</button>
        </fieldset>
        <fieldset class="panel"><legend>Storage</legend>
          <label for="s-ret">Retention (days)</label>
          <input id="s-ret" type="number" value={draft.storage.retentionDays} aria-invalid={!!errs["storage.retentionDays"]} aria-describedby="err-storage.retentionDays"
                 onInput={(e) => set("storage", { retentionDays: num(e.currentTarget.value) })} />
          {fieldError("storage.retentionDays")}
          <label for="s-max">Max storage (GB)</label>
          <input id="s-max" type="number" step="0.1" value={draft.storage.maxStorageGb} aria-invalid={!!errs["storage.maxStorageGb"]} onInput={(e) => set("storage", { maxStorageGb: num(e.currentTarget.value) })} />
          {fieldError("storage.maxStorageGb")}
          <label for="s-fmt">Export format</label>
          <select id="s-fmt" value={draft.storage.exportFormat} onChange={(e) => set("storage", { exportFormat: e.currentTarget.value as "csv" })}>
            <option value="csv">csv</option><option value="json">json</option>
          </select>
          <button type="button" onClick={() => save("storage")}>Save storage</button>
        </fieldset>
      </div>}
      <section class="panel" aria-labelledby="analysis-title">
        <h2 id="analysis-title">Analysis config (JSON, validated by the appliance)</h2>
        <ErrorNote error={analysisError} retry={reloadAnalysis} />
        <textarea aria-label="Analysis config JSON" rows={16} spellcheck={false} value={analysisText} onInput={(e) => setAnalysisText(e.currentTarget.value)} />
        <button type="button" onClick={saveAnalysis}>Save analysis config</button>
        <p role="status" class="muted">{analysisMsg}</p>
      </section>
      <section class="panel" aria-labelledby="capture-title">
        <h2 id="capture-title">Port capture</h2>
        <CaptureState ctx={ctx} />
      </section>
    </Page>
  );
}

function CaptureState({ ctx }: PageProps) {
  const c = ctx.capture;
  useEffect(() => { void c.refresh(); }, []);
  return (
    <div>
      <p>Status: <strong data-testid="capture-status">{c.status.value}</strong>{c.message.value ? ` — ${c.message.value}` : ""}</p>
      {c.status.value !== "error" && <p>{c.packetCount.value} packets, {c.byteCount.value} bytes, {c.droppedCount.value} dropped</p>}
      <div class="toolbar">
        <button type="button" onClick={() => c.refresh()}>Refresh</button>
        <button type="button" onClick={() => c.start()} disabled={c.status.value === "running"}>Start</button>
        <button type="button" onClick={() => c.stop()} disabled={c.status.value !== "running"}>Stop</button>
      </div>
    </div>
  );
}
