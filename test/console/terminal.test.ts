import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, keyFor } from '../harness.js';
import { type ConsoleEnv, shot, signIn, startConsole } from './browser.js';

// The sandbox page's terminal (packages/console/src/pages/sandbox-terminal.tsx): xterm.js on the shell WebSocket of a
// real sandbox (runc), its credential in the query, under the console's strict CSP.

let env: ConsoleEnv;
let sandboxId: string;

beforeAll(async () => {
  env = await startConsole();
  const res = await env.h.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: env.admin.headers, payload: { network: false } });
  expect(res.statusCode, res.body).toBe(201);
  sandboxId = json(res).data.id;
}, 120_000);
afterAll(() => env?.close(), 60_000);

/** Every console message about the CSP (any level): there must be none. */
function cspMessages(page: Page): string[] {
  const seen: string[] = [];
  page.on('console', (m) => {
    if (/Content[- ]Security[- ]Policy|Refused to/i.test(m.text())) seen.push(`${m.type()}: ${m.text()}`);
  });
  return seen;
}

/** The terminal's rows as the user sees them. */
function screen(page: Page) {
  return page.getByRole('region', { name: 'Terminal' }).locator('.xterm-rows');
}

async function waitForScreen(page: Page, what: RegExp) {
  // biome-ignore lint/performance/useDomNodeTextContent: Playwright's innerText, for the rows' line breaks
  await expect.poll(async () => (await screen(page).innerText()).replace(/\u00a0/g, ' '), { timeout: 20_000 }).toMatch(what);
}

describe('the sandbox terminal', () => {
  it('types into the sandbox’s shell and shows its output, its exit code, and reconnects; no CSP violation', { timeout: 90_000 }, async () => {
    const { page, problems } = await signIn(env);
    const csp = cspMessages(page);
    await page.goto(`${env.url}/sandboxes/${sandboxId}`);
    const terminal = page.getByRole('region', { name: 'Terminal' });
    const status = terminal.getByRole('status');
    await status.filter({ hasText: 'Connected' }).waitFor({ timeout: 20_000 });
    expect(await status.getAttribute('aria-live')).toBe('polite');
    await waitForScreen(page, /user@\S+:~\$/);

    await terminal.locator('.xterm').click();
    await page.keyboard.type('echo hello-$((6*7))');
    await page.keyboard.press('Enter');
    // What was typed reads "hello-$((6*7))": "hello-42" is the shell's output.
    await waitForScreen(page, /hello-42/);
    // The terminal's size is what fits the element, and the shell sees it.
    const rows = await screen(page).locator('> div').count();
    expect(rows).toBeGreaterThan(5);
    await page.keyboard.type('stty size');
    await page.keyboard.press('Enter');
    await waitForScreen(page, new RegExp(`\\n${rows} \\d{2,3}\\s*\\n`));
    await shot(page, 'sandbox-terminal');

    await page.keyboard.type('exit 3');
    await page.keyboard.press('Enter');
    await status.filter({ hasText: 'Exited with code 3' }).waitFor();
    await terminal.getByRole('button', { name: 'Reconnect' }).click();
    await status.filter({ hasText: 'Connected' }).waitFor({ timeout: 20_000 });
    await expect.poll(() => terminal.getByRole('button', { name: 'Reconnect' }).count()).toBe(0);
    await waitForScreen(page, /user@\S+:~\$/);
    await terminal.locator('.xterm').click();
    await page.keyboard.type('echo again-$((2+3))');
    await page.keyboard.press('Enter');
    await waitForScreen(page, /again-5/);
    // No keyboard trap: Tab is the shell's, Escape then Tab moves on.
    const inTerminal = () => page.evaluate(() => Boolean(document.activeElement?.closest('.xterm')));
    await page.keyboard.press('Tab');
    expect(await inTerminal()).toBe(true);
    await page.keyboard.press('Escape');
    await page.keyboard.press('Tab');
    expect(await inTerminal()).toBe(false);

    expect(csp).toEqual([]);
    expect(problems).toEqual([]);
    await page.context().close();
  });

  it('connects with a session token too (token and org_id in the query)', { timeout: 60_000 }, async () => {
    const { page, problems } = await signIn(env, env.admin.token);
    const sockets: string[] = [];
    page.on('websocket', (ws) => sockets.push(ws.url()));
    await page.goto(`${env.url}/sandboxes/${sandboxId}`);
    const terminal = page.getByRole('region', { name: 'Terminal' });
    await terminal.getByRole('status').filter({ hasText: 'Connected' }).waitFor({ timeout: 20_000 });
    await waitForScreen(page, /user@\S+:~\$/);
    await terminal.locator('.xterm').click();
    await page.keyboard.type('echo token-$((6*7))');
    await page.keyboard.press('Enter');
    await waitForScreen(page, /token-42/);
    const shell = new URL(sockets.find((u) => u.includes('/shell')) ?? 'ws://none');
    expect(shell.searchParams.get('token')).toBe(env.admin.token);
    expect(shell.searchParams.get('org_id')).toBe(env.admin.orgId);
    expect(shell.searchParams.has('api_key')).toBe(false);
    expect(problems).toEqual([]);
    await page.context().close();
  });

  it('shows a revoked key’s session as disconnected, and why a reconnect is refused', { timeout: 60_000 }, async () => {
    const created = await env.h.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: env.admin.headers,
      payload: { name: 'terminal-revoked', scopes: ['*'] },
    });
    expect(created.statusCode, created.body).toBe(201);
    const { id, key } = json(created).data;
    const { page, problems } = await signIn(env, key);
    await page.goto(`${env.url}/sandboxes/${sandboxId}`);
    const terminal = page.getByRole('region', { name: 'Terminal' });
    const status = terminal.getByRole('status');
    await status.filter({ hasText: 'Connected' }).waitFor({ timeout: 20_000 });
    await waitForScreen(page, /user@\S+:~\$/);
    const revoked = await env.h.app.inject({ method: 'DELETE', url: `/v1/api-keys/${id}`, headers: env.admin.headers });
    expect(revoked.statusCode, revoked.body).toBe(200);
    await status.filter({ hasText: 'Disconnected: the API key was revoked' }).waitFor({ timeout: 20_000 });
    await terminal.getByRole('button', { name: 'Reconnect' }).click();
    // The browser learns nothing from a refused upgrade: the terminal asks the API why and shows its error.
    const alert = terminal.getByRole('alert');
    await alert.waitFor({ timeout: 20_000 });
    expect(await alert.textContent()).toContain('unauthenticated');
    expect(await status.textContent()).toContain('Disconnected');
    expect(problems).toEqual([]);
    await page.context().close();
  });

  it('says so, and opens no socket, for a credential without sandbox:write', { timeout: 60_000 }, async () => {
    const readOnly = await keyFor(env.h, env.admin, ['sandbox:read']);
    const { page, problems } = await signIn(env, readOnly);
    const sockets: string[] = [];
    page.on('websocket', (ws) => sockets.push(ws.url()));
    await page.goto(`${env.url}/sandboxes/${sandboxId}`);
    const terminal = page.getByRole('region', { name: 'Terminal' });
    await terminal.getByText('A terminal needs the sandbox:write scope').waitFor();
    expect(await terminal.locator('.xterm').count()).toBe(0);
    expect(sockets.filter((u) => u.includes('/shell'))).toEqual([]);
    expect(problems).toEqual([]);
    await page.context().close();
  });
});
