import { useState } from "preact/hooks";
import type { PageProps } from "../context.ts";
import { ApiError } from "../api/client.ts";
import { errorText } from "../components/ui.tsx";

export function SignIn({ ctx }: PageProps) {
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError("");
    try {
      const s = await ctx.api.login(username, password);
      ctx.api.setCsrf(s.csrfToken);
      ctx.session.value = s;
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401 ? "Wrong username or password." : errorText(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main id="main" class="signin">
      <form onSubmit={submit} aria-labelledby="signin-title">
        <h1 id="signin-title">Sign in to the sensor console</h1>
        <label for="username">Username</label>
        <input id="username" name="username" autoComplete="username" required value={username}
               onInput={(e) => setUsername(e.currentTarget.value)} />
        <label for="password">Password</label>
        <input id="password" name="password" type="password" autoComplete="current-password" required value={password}
               onInput={(e) => setPassword(e.currentTarget.value)} />
        {error && <p class="error" role="alert">{error}</p>}
        <button type="submit" disabled={busy}>Sign in</button>
      </form>
    </main>
  );
}
