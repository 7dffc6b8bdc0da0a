import { useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import type { EnrollmentToken } from "../api/client.ts";
import { CopyButton, ErrorNote, Page, fmtTime, useLoad } from "../components/ui.tsx";

export function Enrollment({ ctx }: PageProps) {
  const [token, setToken] = useState<EnrollmentToken | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [certs, certsError, reload] = useLoad(() => ctx.api.certificates());
  const create = async () => {
    try { setToken(await ctx.api.createEnrollmentToken()); setError(null); } catch (err) { setError(err); }
  };
  const revoke = async (id: string) => {
    if (!confirm(`Revoke the certificates of ${id}? The agent can no longer stream.`)) return;
    try { await ctx.api.revokeAgent(id); reload(); } catch (err) { setError(err); }
  };
  return (
    <Page title="Enrollment">
      <ErrorNote error={error || certsError} retry={reload} />
      <button type="button" onClick={create}>Create an enrollment token</button>
      {token && (
        <section class="panel" aria-labelledby="cmd-title">
          <h2 id="cmd-title">Paste one command on the machine to enroll</h2>
          <p>Single use; expires {fmtTime(token.expires_at)}.</p>
          <h3>Windows (PowerShell, as administrator)</h3>
          <pre class="cmd" data-testid="cmd-windows">{token.command}</pre>
          <CopyButton text={token.command} label="Copy the Windows command" />
          <h3>Linux / macOS (as root)</h3>
          <pre class="cmd" data-testid="cmd-unix">{token.command_unix}</pre>
          <CopyButton text={token.command_unix} label="Copy the Linux and macOS command" />
        </section>
      )}
      <h2>Enrolled agents</h2>
      <table aria-label="Agent certificates">
        <thead><tr><th scope="col">Agent</th><th scope="col">Name</th><th scope="col">OS</th><th scope="col">Issued</th>
          <th scope="col">Expires</th><th scope="col">Revoked</th><th scope="col">Action</th></tr></thead>
        <tbody>
          {(certs?.certificates ?? []).map((c) => (
            <tr key={c.fingerprint}><td>{c.agent_id ?? "not bound yet"}</td><td>{c.common_name}</td><td>{c.os}</td>
              <td>{fmtTime(c.issued_at)}</td><td>{fmtTime(c.not_after)}</td><td>{c.revoked_at ? fmtTime(c.revoked_at) : "no"}</td>
              <td>{!c.revoked_at && <button type="button" onClick={() => revoke(c.agent_id ?? c.fingerprint)}
                  aria-label={`Revoke ${c.common_name}`}>Revoke</button>}</td></tr>
          ))}
          {certs && !certs.certificates.length && <tr><td colSpan={7} class="muted">No agent enrolled yet.</td></tr>}
        </tbody>
      </table>
    </Page>
  );
}
