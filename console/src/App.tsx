// The shell: checks the session, shows sign-in or the navigation and the routed page.
import { useEffect, useState } from "preact/hooks";
import type { FunctionComponent } from "preact";
import type { Ctx, PageProps } from "./context.ts";
import { navigate, route } from "./components/ui.tsx";
import { SignIn } from "./pages/SignIn.tsx";
import { Overview } from "./pages/Overview.tsx";
import { Alerts } from "./pages/Alerts.tsx";
import { AlertDetail } from "./pages/AlertDetail.tsx";
import { Flows } from "./pages/Flows.tsx";
import { Agents, AgentDetail } from "./pages/Agents.tsx";
import { Processes } from "./pages/Processes.tsx";
import { Rules } from "./pages/Rules.tsx";
import { Exclusions } from "./pages/Exclusions.tsx";
import { Config } from "./pages/Config.tsx";
import { Enrollment } from "./pages/Enrollment.tsx";
import { Users } from "./pages/Users.tsx";

interface RouteEntry { path: string; label: string; page: FunctionComponent<PageProps>; admin?: boolean; detail?: FunctionComponent<PageProps> }
/** The pages, in navigation order. `admin` pages are hidden from analysts (the server refuses them anyway). */
const ROUTES: RouteEntry[] = [
  { path: "/", label: "Overview", page: Overview },
  { path: "/alerts", label: "Alerts", page: Alerts, detail: AlertDetail },
  { path: "/flows", label: "Flows", page: Flows },
  { path: "/agents", label: "Agents", page: Agents, detail: AgentDetail },
  { path: "/processes", label: "Processes", page: Processes },
  { path: "/rules", label: "Rules", page: Rules },
  { path: "/exclusions", label: "Exclusions", page: Exclusions },
  { path: "/config", label: "Config", page: Config },
  { path: "/enrollment", label: "Enrollment", page: Enrollment, admin: true },
  { path: "/users", label: "Users", page: Users },
];

function resolve(path: string): { entry: RouteEntry; id?: string } {
  for (const entry of ROUTES) {
    if (entry.path === "/" ? path === "/" : path === entry.path) return { entry };
    if (entry.detail && path.startsWith(`${entry.path}/`)) return { entry, id: decodeURIComponent(path.slice(entry.path.length + 1)) };
  }
  return { entry: ROUTES[0] };
}

export function App({ ctx }: { ctx: Ctx }) {
  const [checked, setChecked] = useState(false);
  const session = ctx.session.value;

  useEffect(() => {
    ctx.api.me().then((s) => { ctx.api.setCsrf(s.csrfToken); ctx.session.value = s; }, () => { ctx.session.value = null; })
      .finally(() => setChecked(true));
  }, []);

  if (!checked) return <main id="main"><p role="status">Loading…</p></main>;
  if (!session) return <SignIn ctx={ctx} />;

  const { entry, id } = resolve(route.value.path);
  const Page = id !== undefined && entry.detail ? entry.detail : entry.page;
  const signOut = async () => {
    try { await ctx.api.logout(); } finally { ctx.session.value = null; navigate("/"); }
  };
  return (
    <div class="shell">
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById("main")?.focus(); }}>Skip to content</a>
      <nav aria-label="Main">
        <p class="brand">Sensor console</p>
        <ul>
          {ROUTES.filter((r) => !r.admin || session.user.role === "admin").map((r) => (
            <li key={r.path}>
              <a href={`#${r.path}`} aria-current={r === entry ? "page" : undefined}>{r.label}</a>
            </li>
          ))}
        </ul>
        <p class="who">{session.user.username} <span class="muted">({session.user.role})</span></p>
        <button type="button" onClick={signOut}>Sign out</button>
      </nav>
      <main id="main" tabIndex={-1}>
        <Page ctx={ctx} id={id} key={`${entry.path}/${id ?? ""}`} />
      </main>
    </div>
  );
}
