import { type ComponentType, createElement, Suspense } from 'react';
import { Link, Redirect, Route, Switch, useLocation } from 'wouter';
import { SessionProvider, useSession } from './api.js';
import { SignIn } from './pages/sign-in.js';
import { Loading } from './ui.js';

/**
 * A page in a chunk of its own. Unlike React.lazy, a page whose chunk has arrived renders at once: React holds a
 * Suspense fallback on screen for at least 300 ms once shown, which a chunk fetched beside the sign-in check
 * (below) would otherwise pay on every first visit.
 */
function lazyPage(load: () => Promise<{ default: ComponentType }>) {
  let loaded: ComponentType | null = null;
  let pending: Promise<void> | null = null;
  const preload = () => {
    pending ??= load().then((m) => {
      loaded = m.default;
    });
    return pending;
  };
  // biome-ignore lint/correctness/noComponentHookFactories: made once per page when this module loads, never during a render
  function Page() {
    if (loaded) return createElement(loaded);
    throw preload();
  }
  return Object.assign(Page, { preload });
}

const pages = {
  overview: lazyPage(() => import('./pages/overview.js')),
  threads: lazyPage(() => import('./pages/threads.js')),
  thread: lazyPage(() => import('./pages/thread.js')),
  agents: lazyPage(() => import('./pages/agents.js')),
  sandboxes: lazyPage(() => import('./pages/sandboxes.js')),
  sandbox: lazyPage(() => import('./pages/sandbox.js')),
  templates: lazyPage(() => import('./pages/templates.js')),
  activity: lazyPage(() => import('./pages/activity.js')),
  settings: lazyPage(() => import('./pages/settings.js')),
};

/** The page a path shows. */
export function pageFor(path: string): keyof typeof pages {
  const [, first = '', second] = path.split('/');
  if (first === 'threads') return second ? 'thread' : 'threads';
  if (first === 'sandboxes') return second ? 'sandbox' : 'sandboxes';
  if (first === 'link') return 'settings';
  return first in pages ? (first as keyof typeof pages) : 'overview';
}
// The current URL's page is fetched at start-up, beside the sign-in check (GET /v1/me), and the others once the
// browser is idle, so moving between pages does not wait for the network.
void pages[pageFor(window.location.pathname)].preload().catch(() => undefined);
setTimeout(() => {
  for (const p of Object.values(pages)) void p.preload().catch(() => undefined);
}, 2000);

const Overview = pages.overview;
const Threads = pages.threads;
const Thread = pages.thread;
const Agents = pages.agents;
const Sandboxes = pages.sandboxes;
const SandboxPage = pages.sandbox;
const Templates = pages.templates;
const Activity = pages.activity;
const Settings = pages.settings;

/** The top-level paths of the console; `hangar serve` answers each of them (and what is under them) with the app. */
export const NAV = [
  { href: '/', label: 'Overview' },
  { href: '/threads', label: 'Threads' },
  { href: '/agents', label: 'Agents' },
  { href: '/sandboxes', label: 'Sandboxes' },
  { href: '/templates', label: 'Templates' },
  { href: '/activity', label: 'Activity' },
  { href: '/settings', label: 'Settings' },
] as const;

function Shell() {
  const session = useSession();
  const [location] = useLocation();
  const org = session.me.organizations.find((o) => o.id === session.me.currentOrganizationId);
  const active = (href: string) => (href === '/' ? location === '/' : location === href || location.startsWith(`${href}/`));
  return (
    <div className="shell">
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="topbar">
        <Link href="/" className="brand">
          Hangar
        </Link>
        <nav aria-label="Main">
          <ul>
            {NAV.map((n) => (
              <li key={n.href}>
                <Link href={n.href} aria-current={active(n.href) ? 'page' : undefined}>
                  {n.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div className="who">
          <span data-testid="org-name" title={org?.id}>
            {org?.name ?? 'no organization'}
          </span>
          <span className="muted">{session.me.user.email ?? session.me.user.name ?? session.me.user.id}</span>
          <button type="button" className="btn btn-secondary" onClick={session.signOut}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        <Suspense fallback={<Loading />}>
          <Switch>
            <Route path="/" component={Overview} />
            <Route path="/threads" component={Threads} />
            <Route path="/threads/:id" component={Thread} />
            <Route path="/agents" nest component={Agents} />
            <Route path="/sandboxes" component={Sandboxes} />
            <Route path="/sandboxes/:id" component={SandboxPage} />
            <Route path="/templates" nest component={Templates} />
            <Route path="/activity" component={Activity} />
            <Route path="/settings" nest component={Settings} />
            <Route path="/link" nest component={Settings} />
            <Route path="/sign-in">
              <Redirect to="/" />
            </Route>
            <Route>
              <div className="empty">
                No page here. <Link href="/">Back to the overview</Link>
              </div>
            </Route>
          </Switch>
        </Suspense>
      </main>
    </div>
  );
}

export function App() {
  return <SessionProvider signedOut={(onSignedIn) => <SignIn onSignedIn={onSignedIn} />}>{<Shell />}</SessionProvider>;
}
