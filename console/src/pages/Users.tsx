// Console accounts: everyone changes their own password; admins list, create and disable accounts (the
// dashboard refuses the list to analysts with 403, shown in words).
import { useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import type { Role } from "../api/client.ts";
import { ApiError } from "../api/client.ts";
import { ErrorNote, Page, useLoad } from "../components/ui.tsx";

export function Users({ ctx }: PageProps) {
  const me = ctx.session.value!.user;
  const [list, listError, reload] = useLoad(() => ctx.api.users());
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const [role, setRole] = useState<Role>("analyst");
  const [fields, setFields] = useState<Record<string, string>>({});
  const [error, setError] = useState<unknown>(null);
  const [message, setMessage] = useState("");
  const [current, setCurrent] = useState("");
  const [next, setNext] = useState("");
  const [pwMessage, setPwMessage] = useState("");
  const [pwFields, setPwFields] = useState<Record<string, string>>({});

  const create = async (e: Event) => {
    e.preventDefault();
    setFields({}); setError(null); setMessage("");
    try {
      await ctx.api.createUser(username, password, role);
      setMessage(`Created ${username} (${role}).`); setUsername(""); setPassword("");
      reload();
    } catch (err) {
      if (err instanceof ApiError && Object.keys(err.fields).length) setFields(err.fields);
      setError(err);
    }
  };
  const setDisabled = async (name: string, disabled: boolean) => {
    try { await ctx.api.setUserDisabled(name, disabled); reload(); } catch (err) { setError(err); }
  };
  const changePassword = async (e: Event) => {
    e.preventDefault();
    setPwFields({}); setPwMessage("");
    try {
      await ctx.api.changePassword(current, next);
      setPwMessage("Password changed."); setCurrent(""); setNext("");
    } catch (err) {
      if (err instanceof ApiError) { setPwFields(err.fields); setPwMessage(err.userMessage); } else setPwMessage(String(err));
    }
  };
  return (
    <Page title="Users">
      <form class="panel form-grid" onSubmit={changePassword} aria-labelledby="pw-title">
        <h2 id="pw-title">Change my password ({me.username})</h2>
        <label for="pw-current">Current password</label>
        <input id="pw-current" type="password" autoComplete="current-password" required value={current} onInput={(e) => setCurrent(e.currentTarget.value)} />
        <label for="pw-new">New password (12 characters or more)</label>
        <input id="pw-new" type="password" autoComplete="new-password" required value={next} aria-invalid={!!pwFields.new} onInput={(e) => setNext(e.currentTarget.value)} />
        {pwFields.new && <p class="field-error">{pwFields.new}</p>}
        <button type="submit">Change password</button>
        <p role="status" class="muted">{pwMessage}</p>
      </form>
      <h2>Accounts</h2>
      <ErrorNote error={listError} retry={reload} />
      {list && (
        <table aria-label="Accounts">
          <thead><tr><th scope="col">User</th><th scope="col">Role</th><th scope="col">State</th><th scope="col">Action</th></tr></thead>
          <tbody>
            {list.users.map((u) => (
              <tr key={u.username}><td>{u.username}</td><td>{u.role}</td><td>{u.disabled ? "disabled" : "active"}</td>
                <td>{u.username !== me.username && <button type="button" onClick={() => setDisabled(u.username, !u.disabled)}>
                  {u.disabled ? "Enable" : "Disable"} {u.username}</button>}</td></tr>
            ))}
          </tbody>
        </table>
      )}
      {list && (
        <form class="panel form-grid" onSubmit={create} aria-labelledby="new-user">
          <h2 id="new-user">Create an account</h2>
          <label for="u-name">Username</label>
          <input id="u-name" required value={username} aria-invalid={!!fields.username} onInput={(e) => setUsername(e.currentTarget.value)} />
          {fields.username && <p class="field-error">{fields.username}</p>}
          <label for="u-pass">Password (12 characters or more)</label>
          <input id="u-pass" type="password" autoComplete="new-password" required value={password} aria-invalid={!!fields.password} onInput={(e) => setPassword(e.currentTarget.value)} />
          {fields.password && <p class="field-error">{fields.password}</p>}
          <label for="u-role">Role</label>
          <select id="u-role" value={role} onChange={(e) => setRole(e.currentTarget.value as Role)}>
            <option value="analyst">analyst</option><option value="admin">admin</option>
          </select>
          <button type="submit">Create</button>
          <ErrorNote error={error} />
          <p role="status" class="muted">{message}</p>
        </form>
      )}
    </Page>
  );
}
