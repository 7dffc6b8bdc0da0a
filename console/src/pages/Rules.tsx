// Rules: list with enable/disable toggles, a YAML editor that validates (dry run) before saving and shows the
// API's messages at their line, reload. The YAML parser is loaded only on this page (its own chunk).
import { useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import type { Rule } from "../api/client.ts";
import { ApiError } from "../api/client.ts";
import { ErrorNote, Page, fmtTime, useLoad } from "../components/ui.tsx";
import { locateProblems } from "./ruleLines.ts";
import type { LineProblem } from "./ruleLines.ts";

const TEMPLATE = `id: SIG-LOCAL-001
title: My rule
description: What it finds and why.
protocol: dns
category: DnsTunneling
severity: Medium
confidence: 0.5
enabled: true
conditions:
  - field: dns.qname_length
    op: gt
    value: 80
`;

async function parseYaml(text: string): Promise<unknown> {
  const yaml = await import("js-yaml");
  return yaml.load(text, { schema: yaml.JSON_SCHEMA });
}

export function Rules({ ctx }: PageProps) {
  const [state, loadError, reload] = useLoad(() => ctx.api.signatures());
  const [text, setText] = useState(TEMPLATE);
  const [problems, setProblems] = useState<LineProblem[]>([]);
  const [message, setMessage] = useState("");
  const [error, setError] = useState<unknown>(null);

  const check = async (save: boolean) => {
    setMessage(""); setProblems([]); setError(null);
    let rule: unknown;
    try {
      rule = await parseYaml(text);
    } catch (err) {
      const mark = (err as { mark?: { line: number } }).mark;
      setProblems([{ line: mark ? mark.line + 1 : null, message: `not valid YAML: ${(err as { reason?: string }).reason ?? String(err)}` }]);
      return;
    }
    try {
      if (save) {
        await ctx.api.saveSignature(rule);
        setMessage("Saved and reloaded.");
        reload();
      } else {
        await ctx.api.validateSignature(rule);
        setMessage("Valid: the appliance accepts this rule.");
      }
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) setProblems(locateProblems(text, err.message));
      else setError(err);
    }
  };
  const toggle = async (rule: Rule) => {
    try {
      const reply = await ctx.api.toggleSignature(rule.id, !rule.enabled);
      setMessage(`Rule ${rule.id} ${reply.rule.enabled ? "enabled" : "disabled"}.`);
      reload();
    } catch (err) { setError(err); reload(); }
  };
  const doReload = async () => {
    try { await ctx.api.reloadSignatures(); reload(); setMessage("Rules reloaded."); } catch (err) { setError(err); }
  };
  const edit = async (rule: Rule) => {
    const yaml = await import("js-yaml");
    const { file: _file, ...body } = rule;
    setText(yaml.dump(body, { lineWidth: 120 }));
    document.getElementById("rule-editor")?.focus();
  };
  const lines = text.split("\n");

  return (
    <Page title="Rules" actions={<button type="button" onClick={doReload}>Reload from disk</button>}>
      <ErrorNote error={loadError || error} retry={reload} />
      {state && <p class="muted">{state.loaded} rules loaded from {state.directory}; last reload {fmtTime(state.last_reload_at ? state.last_reload_at * 1000 : null)}
        {state.last_error ? <span class="field-error"> Last error: {state.last_error}</span> : null}</p>}
      <table aria-label="Rules">
        <thead><tr><th scope="col">Enabled</th><th scope="col">Id</th><th scope="col">Title</th><th scope="col">Protocol</th>
          <th scope="col">Severity</th><th scope="col">Edit</th></tr></thead>
        <tbody>
          {(state?.rules ?? []).map((r) => (
            <tr key={r.id}>
              <td><input type="checkbox" checked={r.enabled} aria-label={`Enable rule ${r.id}`} onChange={() => toggle(r)} /></td>
              <td><code>{r.id}</code></td><td>{String(r.title ?? "")}</td><td>{String(r.protocol ?? "")}</td>
              <td>{String(r.severity ?? "")}</td>
              <td><button type="button" onClick={() => edit(r)} aria-label={`Edit rule ${r.id}`}>Edit</button></td>
            </tr>
          ))}
        </tbody>
      </table>
      <section class="panel" aria-labelledby="editor-title">
        <h2 id="editor-title">Rule editor (YAML)</h2>
        <div class="editor">
          <pre class="gutter" aria-hidden="true">{lines.map((_, i) => {
            const bad = problems.some((p) => p.line === i + 1);
            return <span key={i} class={bad ? "bad-line" : ""}>{i + 1}{"\n"}</span>;
          })}</pre>
          <textarea id="rule-editor" aria-label="Rule YAML" spellcheck={false} rows={Math.max(14, lines.length + 1)}
                    value={text} aria-invalid={problems.length > 0} aria-describedby="rule-problems"
                    onInput={(e) => setText(e.currentTarget.value)} />
        </div>
        <ul id="rule-problems" class="problems" role="alert">
          {problems.map((p, i) => <li key={i} class="field-error">{p.line ? `Line ${p.line}: ` : ""}{p.message}</li>)}
        </ul>
        <p role="status" class="muted">{message}</p>
        <div class="toolbar">
          <button type="button" onClick={() => check(false)}>Validate</button>
          <button type="button" onClick={() => check(true)}>Save</button>
        </div>
      </section>
    </Page>
  );
}
