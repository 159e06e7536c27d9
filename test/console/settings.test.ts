import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addOrgMember, createOrgAdmin, json } from '../harness.js';
import { type ConsoleEnv, shot, signedInPage, startConsole } from './browser.js';

let env: ConsoleEnv;

/** Calls the API over the network with a credential, as code using a key would. */
function api(path: string, key: string, init: RequestInit = {}) {
  return fetch(`${env.url}${path}`, { ...init, headers: { 'x-api-key': key, 'content-type': 'application/json', ...(init.headers ?? {}) } });
}

/** A page that accepts the console's confirmation dialogs (revoke, remove, delete). */
async function confirmingPage(key?: string): Promise<Page> {
  const page = await signedInPage(env, key);
  page.on('dialog', (d) => void d.accept());
  return page;
}

beforeAll(async () => {
  env = await startConsole();
}, 120_000);

afterAll(async () => {
  await env?.close();
});

describe('settings: API keys', () => {
  it('creates a key shown once, which works against the API until revoked in the console', { timeout: 90_000 }, async () => {
    const page = await confirmingPage();
    await page.goto(`${env.url}/settings/keys`);
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    await expect(page.getByRole('link', { name: 'API keys' }).getAttribute('aria-current')).resolves.toBe('page');

    await page.getByLabel('Name', { exact: true }).fill('ci deploy key');
    await page.getByLabel('Environment').selectOption('live');
    await page.getByRole('checkbox', { name: 'agent:read', exact: true }).check();
    await page.getByRole('checkbox', { name: 'activity:read', exact: true }).check();
    await page.getByRole('button', { name: 'Create key' }).click();

    const box = page.getByTestId('new-key');
    await box.waitFor();
    await expect(box.textContent()).resolves.toContain('you won’t see it again');
    const secret = (await page.getByTestId('new-key-secret').textContent())!.trim();
    expect(secret).toMatch(/^hgr_live_/);
    await expect(page.getByRole('button', { name: 'Copy secret' }).isVisible()).resolves.toBe(true);
    await shot(page, 'settings-keys-created');

    // The key works, for what it was given and no more.
    const ok = await api('/v1/agents', secret);
    expect(ok.status).toBe(200);
    const me = await api('/v1/me', secret);
    expect(json({ body: await me.text() }).data.scopes.sort()).toEqual(['activity:read', 'agent:read']);
    expect((await api('/v1/sandboxes', secret)).status).toBe(403);

    // Listed with its prefix, never its secret; once dismissed the secret is gone for good.
    const row = page.getByTestId('api-key-row').filter({ hasText: 'ci deploy key' });
    await row.waitFor();
    await expect(row.textContent()).resolves.not.toContain(secret);
    await page.getByRole('button', { name: 'I have stored it' }).click();
    await page.reload();
    await row.waitFor();
    expect(await page.content()).not.toContain(secret);

    // Revoke in the console: the row leaves the list and the API refuses the key.
    await page.getByRole('button', { name: 'Revoke ci deploy key' }).click();
    await row.waitFor({ state: 'detached' });
    const refused = await api('/v1/agents', secret);
    expect(refused.status).toBe(401);
    await page.getByLabel('Show revoked keys').check();
    await page.getByTestId('api-key-row').filter({ hasText: 'ci deploy key' }).getByText('revoked').waitFor();
    await shot(page, 'settings-keys');
    await page.context().close();
  });

  it('never shows another organization’s keys or activity', { timeout: 60_000 }, async () => {
    const other = await createOrgAdmin(env.h, 'Other Keys Org');
    const made = await env.h.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: other.headers,
      payload: { name: 'other-org-key', scopes: ['agent:read'] },
    });
    expect(made.statusCode, made.body).toBe(201);

    // Control: the owner sees their key and its activity in their console.
    const owner = await signedInPage(env, other.key);
    await owner.goto(`${env.url}/settings/keys`);
    await owner.getByTestId('api-key-row').filter({ hasText: 'other-org-key' }).waitFor();
    await owner.goto(`${env.url}/activity?resource_type=api_key`);
    await owner.getByText('API key "other-org-key" created').waitFor();
    await owner.context().close();

    // Our admin sees neither.
    const page = await signedInPage(env);
    await page.goto(`${env.url}/settings/keys`);
    await page.getByTestId('api-key-row').first().waitFor();
    expect(await page.getByText('other-org-key').count()).toBe(0);
    await page.getByLabel('Show revoked keys').check();
    await page.getByTestId('api-key-row').first().waitFor();
    expect(await page.getByText('other-org-key').count()).toBe(0);
    await page.goto(`${env.url}/activity?resource_type=api_key`);
    await page.getByTestId('activity-event').first().waitFor();
    expect(await page.getByText('other-org-key').count()).toBe(0);
    await page.context().close();
  });
});

describe('settings: members', () => {
  it('lets an admin add, re-role and remove members', { timeout: 60_000 }, async () => {
    const page = await confirmingPage();
    await page.goto(`${env.url}/settings/members`);
    await page.getByRole('heading', { name: 'Members' }).waitFor();
    await page.getByLabel('Email').fill('newcomer@example.test');
    await page.getByLabel('Role', { exact: true }).selectOption('member');
    await page.getByRole('button', { name: 'Add member' }).click();
    const row = page.getByTestId('member-row').filter({ hasText: 'newcomer@example.test' });
    await row.waitFor();
    await expect(row.textContent()).resolves.toContain('invited');
    await shot(page, 'settings-members');

    await page.getByLabel('Role of newcomer@example.test').selectOption('admin');
    await expect
      .poll(async () => {
        const res = await env.h.app.inject({ method: 'GET', url: `/v1/organizations/${env.admin.orgId}/members`, headers: env.admin.headers });
        return json(res).data.find((m: { email: string }) => m.email === 'newcomer@example.test')?.role;
      })
      .toBe('admin');

    await page.getByRole('button', { name: 'Remove newcomer@example.test' }).click();
    await row.waitFor({ state: 'detached' });
    const after = await env.h.app.inject({ method: 'GET', url: `/v1/organizations/${env.admin.orgId}/members`, headers: env.admin.headers });
    expect(json(after).data.some((m: { email: string }) => m.email === 'newcomer@example.test')).toBe(false);
    await page.context().close();
  });

  it('shows a member without org:admin no member management', { timeout: 60_000 }, async () => {
    const member = await addOrgMember(env.h, env.admin, 'member');
    // Control: the admin sees the member listed, with the controls to manage them.
    const admin = await signedInPage(env);
    await admin.goto(`${env.url}/settings/members`);
    const listed = await env.h.app.inject({ method: 'GET', url: '/v1/me', headers: member.headers });
    const email = json(listed).data.user.email as string;
    await admin.getByTestId('member-row').filter({ hasText: email }).waitFor();
    await expect(admin.getByRole('button', { name: `Remove ${email}` }).isVisible()).resolves.toBe(true);
    await admin.context().close();

    const page = await signedInPage(env, member.key);
    await page.goto(`${env.url}/settings/members`);
    await page.getByText('Member management is for organization admins').waitFor();
    expect(await page.getByRole('button', { name: 'Add member' }).count()).toBe(0);
    expect(await page.getByTestId('member-row').count()).toBe(0);
    await shot(page, 'settings-members-member');
    // Their own keys only.
    await page.goto(`${env.url}/settings/keys`);
    await page.getByTestId('api-key-row').first().waitFor();
    await expect(page.getByText('Your keys in this organization.').isVisible()).resolves.toBe(true);
    expect(await page.getByText('another member’s').count()).toBe(0);
    await page.context().close();
  });
});

describe('settings: secrets', () => {
  it('stores, replaces and deletes a secret without ever showing its value', { timeout: 60_000 }, async () => {
    const page = await confirmingPage();
    await page.goto(`${env.url}/settings/secrets`);
    await page.getByRole('heading', { name: 'Secrets' }).waitFor();
    await page.getByText('No secrets yet').waitFor();
    await expect(page.getByLabel('Secret value').getAttribute('type')).resolves.toBe('password');

    await page.getByLabel('Secret name').fill('my provider key');
    await page.getByLabel('Secret value').fill('sk-very-secret-1');
    await page.getByRole('button', { name: 'Save secret' }).click();
    await page.getByText('MY_PROVIDER_KEY created.').waitFor();
    const row = page.getByTestId('secret-row').filter({ hasText: 'MY_PROVIDER_KEY' });
    await row.waitFor();

    await page.getByLabel('Secret name').fill('MY_PROVIDER_KEY');
    await page.getByLabel('Secret value').fill('sk-very-secret-2');
    await page.getByRole('button', { name: 'Save secret' }).click();
    await page.getByText('MY_PROVIDER_KEY replaced.').waitFor();
    expect(await page.getByTestId('secret-row').count()).toBe(1);
    const html = await page.content();
    expect(html).not.toContain('sk-very-secret');
    await shot(page, 'settings-secrets');

    await page.getByRole('button', { name: 'Delete MY_PROVIDER_KEY (user)' }).click();
    await page.getByText('No secrets yet').waitFor();
    const listed = await env.h.app.inject({ method: 'GET', url: '/v1/secrets', headers: env.admin.headers });
    expect(json(listed).data).toEqual([]);
    await page.context().close();
  });
});
