import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPromoCode } from '../../src/domains/billing/promo.js';
import { addOrgMember, json } from '../harness.js';
import { wgKeyPair } from '../runmesh.js';
import { type ConsoleEnv, shot, signIn, startConsole } from './browser.js';

describe('the web console: connections, channels, devices and the link page, billing', () => {
  let env: ConsoleEnv;
  beforeAll(async () => {
    env = await startConsole();
  }, 120_000);
  afterAll(() => env?.close());

  const api = async (method: string, path: string, key: string | null, body?: unknown) => {
    const res = await fetch(`${env.url}${path}`, {
      method,
      headers: { ...(key ? { 'x-api-key': key } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? json({ body: text }) : null };
  };

  it('billing: shows the balance, redeems a promo code (the balance goes up), a second try shows the API’s refusal; top-up says payments are not configured', async () => {
    const promo = await createPromoCode(env.h.deps, { creditsCents: 2_500, maxRedemptions: 5 });
    const before = (await api('GET', '/v1/billing/credits', env.admin.key)).body.data.balanceCents as number;
    const { page, problems, context } = await signIn(env);
    await page.goto(`${env.url}/settings/billing`);
    const balance = page.getByTestId('balance');
    await balance.waitFor();
    const money = (cents: number) => (cents / 100).toLocaleString('en-US', { style: 'currency', currency: 'USD' });
    expect(await balance.textContent()).toBe(money(before));
    await page.getByLabel('Promo code').fill(promo.code.toLowerCase());
    await page.getByRole('button', { name: 'Redeem' }).click();
    await page.getByText(`Code ${promo.code} added ${money(2_500)}`).waitFor();
    await expect.poll(() => balance.textContent()).toBe(money(before + 2_500));
    // The history shows the promo entry.
    await page.getByRole('cell', { name: `Promo code ${promo.code}` }).waitFor();
    await shot(page, 'settings-billing');
    // Redeeming the same code again: the API's conflict, with its requestId.
    await page.getByLabel('Promo code').fill(promo.code);
    await page.getByRole('button', { name: 'Redeem' }).click();
    const refused = page.getByRole('alert').filter({ hasText: 'Not redeemed' });
    await refused.waitFor();
    expect(await refused.textContent()).toContain('conflict');
    expect(await refused.getByTestId('request-id').textContent()).toMatch(/\S+/);
    // No payment provider on this installation: the top-up shows the API's message.
    await page.getByLabel('Amount (USD)').fill('10');
    await page.getByRole('button', { name: 'Top up' }).click();
    const topup = page.getByRole('alert').filter({ hasText: 'Top-up not started' });
    await topup.waitFor();
    expect(await topup.textContent()).toContain('payments_not_configured');
    expect(page.url()).toBe(`${env.url}/settings/billing`);
    expect(problems).toEqual([]);
    await context.close();
  }, 60_000);

  it('devices: a device starts a link, its url opens the console’s approval page, Approve links it, the device’s poll succeeds, and it is listed', async () => {
    const keys = wgKeyPair();
    const start = await api('POST', '/v1/runmesh/devices/link/start', null, {
      publicKey: keys.publicKey,
      deviceLabel: 'Ada’s build box',
      os: 'Debian 13',
      appVersion: '1.2.3',
    });
    expect(start.status).toBe(201);
    const { code, url, pollSecret } = start.body.data as { code: string; url: string; pollSecret: string };
    // The link url points at the console's page (the console is built and served here).
    expect(url).toBe(`${env.url}/link/${code}`);
    // Before approval the device is told to wait.
    expect((await api('POST', '/v1/runmesh/devices/link/poll', null, { code, pollSecret })).body.data.status).toBe('pending');

    const { page, problems, context } = await signIn(env);
    await page.goto(url);
    await page.getByRole('heading', { name: 'Link a device' }).waitFor();
    expect(await page.getByTestId('link-device').textContent()).toBe('Ada’s build box');
    await page.getByText('Debian 13').waitFor();
    await page.getByText(code, { exact: true }).waitFor();
    await page.getByText(keys.publicKey).waitFor();
    await shot(page, 'link-approval');
    await page.getByRole('button', { name: 'Approve' }).click();
    const approved = page.getByRole('status').filter({ hasText: 'Approved' });
    await approved.waitFor();
    expect(await approved.textContent()).toContain('Ada’s build box');

    // The device's next poll collects its credential (polls at most once per interval).
    let poll: { status: string; nodeId?: string; deviceToken?: string } = { status: 'pending' };
    for (let i = 0; i < 10 && poll.status !== 'approved'; i++) {
      await new Promise((r) => setTimeout(r, 1_100));
      poll = (await api('POST', '/v1/runmesh/devices/link/poll', null, { code, pollSecret })).body.data;
    }
    expect(poll.status).toBe('approved');
    expect(poll.deviceToken).toMatch(/^hgd_/);
    const self = await fetch(`${env.url}/v1/runmesh/device`, { headers: { authorization: `Bearer ${poll.deviceToken}` } });
    expect(self.status).toBe(200);

    // Opening the link again: it was approved, no buttons.
    await page.reload();
    await page.getByText('This code was already approved.').waitFor();
    expect(await page.getByRole('button', { name: 'Approve' }).count()).toBe(0);

    // An unknown code is said plainly.
    await page.goto(`${env.url}/link/ZZZZ-ZZZY`);
    await page.getByText('No device is waiting with this code.').waitFor();

    // Settings › Devices lists it; revoking it stops its credential.
    await page.goto(`${env.url}/settings/devices`);
    const row = page.getByRole('row').filter({ hasText: 'Ada’s build box' });
    await row.waitFor();
    expect(await row.textContent()).toContain(poll.nodeId!);
    await shot(page, 'settings-devices');
    page.once('dialog', (d) => void d.accept());
    await row.getByRole('button', { name: 'Revoke Ada’s build box' }).click();
    await row.getByText('revoked', { exact: true }).waitFor();
    const after = await fetch(`${env.url}/v1/runmesh/device`, { headers: { authorization: `Bearer ${poll.deviceToken}` } });
    expect(after.status).toBe(401);
    expect(problems).toEqual([]);
    await context.close();
  }, 90_000);

  it('connections: an admin adds an OAuth app (its secret never shown back), then Connect opens the provider’s authorization page', async () => {
    const { page, problems, context } = await signIn(env);
    await page.goto(`${env.url}/settings/connections`);
    await page.getByText('No accounts connected yet.').waitFor();
    const github = page.getByRole('listitem').filter({ has: page.getByText('GitHub', { exact: true }) });
    await github.waitFor();
    // No client for GitHub yet on this installation: Connect is disabled until an admin adds one.
    expect(await github.getByRole('button', { name: 'Connect GitHub' }).isDisabled()).toBe(true);
    await page.getByLabel('Provider').selectOption('github');
    await page.getByLabel('Client id').fill('Iv1.console-test');
    await page.getByLabel('Client secret').fill('s3cret-value-9876');
    await page.getByRole('button', { name: 'Save app' }).click();
    const configRow = page.getByRole('row').filter({ hasText: 'Iv1.console-test' });
    await configRow.waitFor();
    expect(await configRow.textContent()).toContain('…9876');
    expect(await configRow.textContent()).not.toContain('……');
    expect(await page.content()).not.toContain('s3cret-value-9876');
    await shot(page, 'settings-connections');
    // The provider's page is not reachable from here: answer it in the browser to see where Connect went.
    await page.route('https://github.com/**', (route) =>
      route.fulfill({ status: 200, contentType: 'text/html', body: '<h1>GitHub authorize (test)</h1>' }),
    );
    await github.getByRole('button', { name: 'Connect GitHub' }).click();
    await page.waitForURL(/^https:\/\/github\.com\/login\/oauth\/authorize\?/);
    const authUrl = new URL(page.url());
    expect(authUrl.searchParams.get('client_id')).toBe('Iv1.console-test');
    expect(authUrl.searchParams.get('code_challenge')).toMatch(/\S+/);
    expect(problems).toEqual([]);
    await context.close();
  }, 60_000);

  it('channels: lists none yet and offers the connect form; a channel the API refuses shows its message', async () => {
    const agent = await api('POST', '/v1/agents', env.admin.key, { slug: 'helpdesk', model: 'test-model', instructions: 'Answer briefly.' });
    expect(agent.status).toBe(201);
    const { page, problems, context } = await signIn(env);
    await page.goto(`${env.url}/settings/channels`);
    await page.getByText('No channels yet.').waitFor();
    await page.getByRole('heading', { name: 'Connect a channel' }).waitFor();
    expect(await page.getByLabel('Agent').inputValue()).toBe('helpdesk');
    // The bot token secret does not exist: the API refuses, naming it, and nothing is listed.
    await page.getByLabel('Bot token secret').fill('NO_SUCH_SECRET');
    await page.getByRole('button', { name: 'Connect channel' }).click();
    const refused = page.getByRole('alert').filter({ hasText: 'Not connected' });
    await refused.waitFor();
    expect(await refused.textContent()).toMatch(/NO_SUCH_SECRET|botTokenSecretName/);
    await page.getByText('No channels yet.').waitFor();
    await shot(page, 'settings-channels');
    expect(problems).toEqual([]);
    await context.close();
  }, 60_000);

  it('a member without admin scopes sees no admin-only controls (billing, OAuth apps, pending codes)', async () => {
    const member = await addOrgMember(env.h, env.admin);
    // Control: the admin's key reads billing; the member's is refused by the API too.
    expect((await api('GET', '/v1/billing/plan', env.admin.key)).status).toBe(200);
    expect((await api('GET', '/v1/billing/plan', member.key)).status).toBe(403);
    const { page, problems, context } = await signIn(env, member.key);
    await page.goto(`${env.url}/settings/billing`);
    await page.getByText('Billing is managed by your organization').waitFor();
    expect(await page.getByRole('button', { name: 'Redeem' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Top up' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Save auto top-up' }).count()).toBe(0);
    await shot(page, 'settings-billing-member');
    await page.goto(`${env.url}/settings/connections`);
    await page.getByRole('heading', { name: 'Providers' }).waitFor();
    await page.getByText('GitHub', { exact: true }).waitFor();
    expect(await page.getByRole('heading', { name: 'Your organization’s OAuth apps' }).count()).toBe(0);
    expect(await page.getByRole('heading', { name: "Your organization's OAuth apps" }).count()).toBe(0);
    expect(await page.getByLabel('Client secret').count()).toBe(0);
    await page.goto(`${env.url}/settings/devices`);
    await page.getByRole('heading', { name: 'Devices' }).waitFor();
    // The organization's pending codes are for admins.
    expect(await page.getByRole('heading', { name: 'Codes waiting for approval' }).count()).toBe(0);
    expect(problems).toEqual([]);
    await context.close();
  }, 60_000);

  it('the link page signed out: sign in there, see the device, Deny: nothing is linked and the device keeps waiting', async () => {
    const member = await addOrgMember(env.h, env.admin);
    const start = await api('POST', '/v1/runmesh/devices/link/start', null, { publicKey: wgKeyPair().publicKey, deviceLabel: 'unknown-laptop' });
    const { code, url, pollSecret } = start.body.data as { code: string; url: string; pollSecret: string };
    const context = await env.browser.newContext();
    const page = await context.newPage();
    await page.goto(url);
    await page.getByLabel('API key or session token').fill(member.key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByTestId('link-device').waitFor();
    expect(page.url()).toBe(url);
    expect(await page.getByTestId('link-device').textContent()).toBe('unknown-laptop');
    await page.getByRole('button', { name: 'Deny' }).click();
    await page.getByRole('status').filter({ hasText: 'Not approved. Nothing was linked' }).waitFor();
    expect(await page.getByRole('button', { name: 'Approve' }).count()).toBe(0);
    await new Promise((r) => setTimeout(r, 1_100));
    expect((await api('POST', '/v1/runmesh/devices/link/poll', null, { code, pollSecret })).body.data.status).toBe('pending');
    expect((await api('GET', '/v1/runmesh/nodes?all=true', env.admin.key)).body.data.nodes.map((n: { name: string }) => n.name)).not.toContain(
      'unknown-laptop',
    );
    await context.close();
  }, 60_000);
});
