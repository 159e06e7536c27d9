import { Link, Route, Switch, useLocation } from 'wouter';
import { PageHeader } from '../ui.js';
import { BillingSettings } from './settings/billing.js';
import { ChannelsSettings } from './settings/channels.js';
import { ConnectionsSettings } from './settings/connections.js';
import { DevicesSettings, LinkApproval } from './settings/devices.js';
import { KeysSettings } from './settings/keys.js';
import { MembersSettings } from './settings/members.js';
import { SecretsSettings } from './settings/secrets.js';

const SECTIONS = [
  { path: '/keys', label: 'API keys', component: KeysSettings },
  { path: '/members', label: 'Members', component: MembersSettings },
  { path: '/secrets', label: 'Secrets', component: SecretsSettings },
  { path: '/connections', label: 'Connections', component: ConnectionsSettings },
  { path: '/channels', label: 'Channels', component: ChannelsSettings },
  { path: '/devices', label: 'Devices', component: DevicesSettings },
  { path: '/billing', label: 'Billing', component: BillingSettings },
] as const;

/** Settings (under /settings) and the device link approval page (under /link, where a device's link `url` points). */
export default function Settings() {
  const [location] = useLocation();
  // Nested under /settings or /link: wouter gives paths relative to the nest.
  const isLink = window.location.pathname.startsWith('/link');
  if (isLink) return <LinkApproval />;
  return (
    <>
      <PageHeader title="Settings" />
      <div className="settings">
        <nav aria-label="Settings" className="subnav">
          <ul>
            {SECTIONS.map((s) => (
              <li key={s.path}>
                <Link href={s.path} aria-current={location === s.path || (location === '/' && s.path === '/keys') ? 'page' : undefined}>
                  {s.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <section className="settings-body">
          <Switch>
            {SECTIONS.map((s) => (
              <Route key={s.path} path={s.path} component={s.component} />
            ))}
            <Route path="/" component={KeysSettings} />
          </Switch>
        </section>
      </div>
    </>
  );
}
