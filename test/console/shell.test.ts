import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeOidcIssuer } from '../fakes/oidc.js';
import { createOrgAdmin, json } from '../harness.js';
import { type ConsoleEnv, shot, signIn, startConsole } from './browser.js';

describe('the web console: served at /, signing in, the page frame', () => {
  let env: ConsoleEnv;
  let issuer: FakeOidcIssuer;
  beforeAll(async () => {
    issuer = await new FakeOidcIssuer().start();
    env = await startConsole({ HANGAR_OIDC_ISSUER: issuer.issuer, HANGAR_OIDC_AUDIENCE: 'hangar-test' });
  }, 120_000);
  afterAll(async () => {
    await env?.close();
    await issuer?.stop();
  });

  it('serves the app at / and its pages with a strict CSP; hashed assets are cached for good', async () => {
    const root = await fetch(`${env.url}/`);
    expect(root.status).toBe(200);
    expect(root.headers.get('content-type')).toMatch(/^text\/html/);
    const csp = root.headers.get('content-security-policy')!;
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toContain('unsafe-inline');
    expect(root.headers.get('cache-control')).toBe('no-cache');
    const html = await root.text();
    const asset = html.match(/src="(\/assets\/[^"]+\.js)"/)![1]!;
    const js = await fetch(`${env.url}${asset}`, { headers: { 'accept-encoding': 'br' } });
    expect(js.status).toBe(200);
    expect(js.headers.get('cache-control')).toContain('immutable');
    expect(js.headers.get('content-encoding')).toBe('br');
    // A page's own URL (reloaded or shared) answers the app too; the API keeps answering JSON.
    for (const p of ['/threads/thr_123', '/settings/keys', '/agents/new', '/link/ABCD-EFGH']) {
      const res = await fetch(`${env.url}${p}`);
      expect(res.status, p).toBe(200);
      expect(await res.text()).toBe(html);
    }
    const again = await fetch(`${env.url}/`, { headers: { 'if-none-match': root.headers.get('etag')! } });
    expect(again.status).toBe(304);
    const api = await fetch(`${env.url}/v1/agentz`, { headers: { 'x-api-key': env.admin.key } });
    expect(api.status).toBe(404);
    const missing = await fetch(`${env.url}/assets/nope.js`);
    expect(missing.status).toBe(404);
    expect((await missing.json()).error.code).toBe('not_found');
  });

  it('signs in with the key hangar init prints, shows the organization, and signs out', async () => {
    const { page, problems, context } = await signIn(env);
    expect(await page.getByTestId('org-name').textContent()).toBe('Console Org');
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Threads' }).click();
    await page.waitForURL(/\/threads$/);
    await shot(page, 'frame');
    // Reloading keeps the session (the credential is kept in this browser's storage).
    await page.reload();
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('API key or session token').waitFor();
    await page.reload();
    await page.getByLabel('API key or session token').waitFor();
    expect(problems).toEqual([]);
    await context.close();
  });

  it('a wrong key is refused with the API message and its requestId', async () => {
    const context = await env.browser.newContext();
    const page = await context.newPage();
    await page.goto(env.url);
    await page.getByLabel('API key or session token').fill('hgr_live_not_a_real_key_at_all');
    await page.getByRole('button', { name: 'Sign in' }).click();
    const alert = page.getByRole('alert');
    await alert.waitFor();
    expect(await alert.textContent()).toMatch(/Could not sign in/);
    expect(await page.getByTestId('request-id').textContent()).toMatch(/\S+/);
    await shot(page, 'sign-in-error');
    await context.close();
  });

  it('signs in with a session token from the built-in issuer, acting in the organization given', async () => {
    const other = await createOrgAdmin(env.h, 'Token Org');
    // Control: the token works against the API for that organization.
    const me = await fetch(`${env.url}/v1/me`, { headers: { authorization: `Bearer ${other.token}`, 'x-org-id': other.orgId } });
    expect(me.status).toBe(200);
    expect(json<any>({ body: await me.text() }).data.currentOrganizationId).toBe(other.orgId);
    const { page, context } = await signIn(env, other.token);
    expect(await page.getByTestId('org-name').textContent()).toBe('Token Org');
    await context.close();
  });

  it('signs in with a token of the configured OIDC issuer, as the member it was invited as', async () => {
    const invite = await fetch(`${env.url}/v1/organizations/${env.admin.orgId}/members`, {
      method: 'POST',
      headers: { 'x-api-key': env.admin.key, 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'oidc-user@example.test', role: 'member' }),
    });
    expect(invite.status).toBe(201);
    const token = await issuer.token({ sub: 'oidc|console', email: 'oidc-user@example.test', emailVerified: true, name: 'Olive' });
    const { page, context } = await signIn(env, token);
    expect(await page.getByTestId('org-name').textContent()).toBe('Console Org');
    expect(await page.getByText('oidc-user@example.test').count()).toBeGreaterThan(0);
    // A token the issuer never signed is refused, with the API's words.
    await page.getByRole('button', { name: 'Sign out' }).click();
    const forged = `${token.slice(0, -6)}AAAAAA`;
    await page.getByLabel('API key or session token').fill(forged);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').waitFor();
    expect(await page.getByRole('alert').textContent()).toMatch(/Could not sign in/);
    await context.close();
  });

  it('fits a phone screen: the navigation wraps and nothing scrolls sideways', async () => {
    const { page, context } = await signIn(env, env.admin.key, { width: 390, height: 844 });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    await shot(page, 'phone');
    await context.close();
  });
});
