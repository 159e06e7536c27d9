import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOrgAdmin, keyFor } from '../harness.js';
import { type ConsoleEnv, type SignedIn, shot, signIn, signedInPage, startConsole } from './browser.js';

// The Sandboxes, Sandbox and Templates pages against a real app: sandboxes are real runc containers (root, as the
// sandboxes domain's own tests), so creating one takes a few seconds and the tests get generous timeouts.

let env: ConsoleEnv;
let owner: SignedIn;
let page: Page;
let sandboxId = '';

beforeAll(async () => {
  env = await startConsole();
  owner = await signIn(env);
  page = owner.page;
}, 120_000);
afterAll(async () => {
  await env?.close();
});

const row = (name: string) => page.getByRole('row').filter({ has: page.getByRole('link', { name, exact: true }) });

describe('the sandboxes list', () => {
  it('shows the empty state, then creates a sandbox from a template and lists it', { timeout: 90_000 }, async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Sandboxes' }).click();
    await page.getByRole('heading', { name: 'Sandboxes', level: 1 }).waitFor();
    await page.getByText('No sandboxes yet.').waitFor();
    // The template picker lists the ready templates; base-ubuntu is the default.
    const template = page.getByLabel('Template');
    await expect.poll(() => template.inputValue()).toBe('base-ubuntu');
    await page.getByLabel('Name (optional)').fill('console-box');
    await page.getByLabel('Internet access').uncheck();
    await shot(page, 'sandboxes-empty');
    await page.getByRole('button', { name: 'Create sandbox' }).click();
    await page.getByText('Sandbox console-box is running.').waitFor({ timeout: 60_000 });
    await row('console-box').waitFor();
    expect(await row('console-box').getByText('running', { exact: true }).isVisible()).toBe(true);
    expect(await row('console-box').getByRole('cell', { name: 'base-ubuntu' }).isVisible()).toBe(true);
    const href = await row('console-box').getByRole('link', { name: 'console-box' }).getAttribute('href');
    expect(href).toMatch(/^\/sandboxes\/sbx_/);
    sandboxId = href!.split('/').pop()!;
    await shot(page, 'sandboxes-list');
  });

  it('pauses a sandbox from its row, and the state filter finds it among the paused', { timeout: 60_000 }, async () => {
    await page.getByRole('button', { name: 'Pause console-box' }).click();
    await page.getByText('Sandbox console-box is paused.').waitFor({ timeout: 30_000 });
    await row('console-box').getByText('paused', { exact: true }).waitFor();
    // The API agrees.
    const res = await fetch(`${env.url}/v1/sandboxes/${sandboxId}`, { headers: { authorization: `Bearer ${env.admin.key}` } });
    expect((await res.json()).data.state).toBe('paused');

    await page.getByLabel('State').selectOption('running');
    await page.getByText('No sandbox is running.').waitFor();
    await page.getByLabel('State').selectOption('paused');
    await row('console-box').waitFor();
    expect(await page.getByRole('button', { name: 'Resume console-box' }).isVisible()).toBe(true);
    await page.getByLabel('State').selectOption('');
  });
});

describe('a sandbox page', () => {
  it('shows its details, and resumes it', { timeout: 60_000 }, async () => {
    await row('console-box').getByRole('link', { name: 'console-box' }).click();
    await page.waitForURL(`**/sandboxes/${sandboxId}`);
    await page.getByRole('heading', { name: 'Sandbox console-box' }).waitFor();
    const state = page.getByTestId('sandbox-state');
    await state.getByText('paused').waitFor();
    await page.getByText('resume it to browse its files').waitFor();
    expect(await page.getByText(sandboxId, { exact: true }).isVisible()).toBe(true);
    expect(await page.getByRole('definition').filter({ hasText: 'MiB memory' }).isVisible()).toBe(true);

    await page.getByRole('button', { name: 'Resume console-box' }).click();
    await state.getByText('running').waitFor({ timeout: 30_000 });
    await page.getByRole('heading', { name: 'Files' }).waitFor();
    expect(await page.getByTestId('cwd').textContent()).toBe('/home/user');
    // Paused again from this page, then resumed: the badge follows each time.
    await page.getByRole('button', { name: 'Pause console-box' }).click();
    await state.getByText('paused').waitFor({ timeout: 30_000 });
    await page.getByRole('button', { name: 'Resume console-box' }).click();
    await state.getByText('running').waitFor({ timeout: 30_000 });
  });

  it('uploads a file through the file input, lists it, and downloads the same bytes', { timeout: 60_000 }, async () => {
    const bytes = Buffer.concat([Buffer.from([0, 255, 254, 1, 0x80, 0xc3]), randomBytes(70_000)]);
    await page.getByLabel('Upload a file').setInputFiles({ name: 'data.bin', mimeType: 'application/octet-stream', buffer: bytes });
    await page
      .getByTestId('files-status')
      .getByText(/Uploaded data\.bin/)
      .waitFor({ timeout: 30_000 });
    const table = page.getByRole('table', { name: 'Files in /home/user' });
    await table.getByRole('cell', { name: 'data.bin', exact: true }).waitFor();
    expect(await table.getByRole('row').filter({ hasText: 'data.bin' }).getByText('68 KiB').isVisible()).toBe(true);

    const download = page.waitForEvent('download');
    await page.getByRole('button', { name: 'Download data.bin' }).click();
    const file = await download;
    expect(file.suggestedFilename()).toBe('data.bin');
    const saved = await readFile((await file.path())!);
    expect(saved.equals(bytes)).toBe(true);

    // The API holds the same bytes.
    const res = await fetch(`${env.url}/v1/sandboxes/${sandboxId}/files/content?path=data.bin`, {
      headers: { authorization: `Bearer ${env.admin.key}` },
    });
    expect(Buffer.from(await res.arrayBuffer()).equals(bytes)).toBe(true);
    await shot(page, 'sandbox-files');
  });

  it('makes a folder, opens it, uploads into it and goes back up', { timeout: 60_000 }, async () => {
    await page.getByLabel('New folder').fill('notes');
    await page.getByRole('button', { name: 'Create folder' }).click();
    await page.getByTestId('files-status').getByText('Folder /home/user/notes created.').waitFor();
    await page.getByRole('button', { name: 'Open folder notes' }).click();
    await expect.poll(() => page.getByTestId('cwd').textContent()).toBe('/home/user/notes');
    await page.getByText('This folder is empty.').waitFor();
    await page.getByLabel('Upload a file').setInputFiles({ name: 'todo.txt', mimeType: 'text/plain', buffer: Buffer.from('buy milk\n') });
    await page.getByRole('table', { name: 'Files in /home/user/notes' }).getByRole('cell', { name: 'todo.txt', exact: true }).waitFor();
    await page.getByRole('button', { name: 'Up to the parent folder' }).click();
    await expect.poll(() => page.getByTestId('cwd').textContent()).toBe('/home/user');
    await page.getByRole('button', { name: 'Open folder notes' }).waitFor();
    // The command line sees what the browser put there.
    const res = await fetch(`${env.url}/v1/sandboxes/${sandboxId}/commands`, {
      method: 'POST',
      headers: { authorization: `Bearer ${env.admin.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ cmd: 'cat notes/todo.txt' }),
    });
    expect((await res.json()).data.stdout).toBe('buy milk\n');
  });

  it('runs a command and shows its output and exit code', { timeout: 60_000 }, async () => {
    await page.getByLabel('Command', { exact: true }).fill('echo hello');
    await page.getByRole('button', { name: 'Run', exact: true }).click();
    await page
      .getByTestId('command-exit')
      .getByText(/^Exit code 0/)
      .waitFor({ timeout: 30_000 });
    expect(await page.getByRole('log', { name: 'Command output' }).textContent()).toBe('hello\n');
  });

  it('streams output while the command runs, with stderr and a failing exit code', { timeout: 60_000 }, async () => {
    await page.getByLabel('Command', { exact: true }).fill('echo first; sleep 3; echo second; echo oops >&2; exit 3');
    await page.getByRole('button', { name: 'Run', exact: true }).click();
    const output = page.getByRole('log', { name: 'Command output' });
    // "first" is on screen before the command has ended.
    await output.getByText('first').waitFor({ timeout: 15_000 });
    expect(await page.getByTestId('command-exit').textContent()).toBe('Running…');
    expect(await output.textContent()).not.toContain('second');
    await page
      .getByTestId('command-exit')
      .getByText(/^Exit code 3/)
      .waitFor({ timeout: 30_000 });
    // stdout and stderr are two pipes: each in its order, stderr marked as such.
    expect((await output.locator('span:not(.stderr)').allTextContents()).join('')).toBe('first\nsecond\n');
    expect((await output.locator('.stderr').allTextContents()).join('')).toBe('oops\n');
    await shot(page, 'sandbox-command');
  });

  it('resumes a paused sandbox to run a command in it', { timeout: 60_000 }, async () => {
    const state = page.getByTestId('sandbox-state');
    await page.getByRole('button', { name: 'Pause console-box' }).click();
    await state.getByText('paused').waitFor({ timeout: 30_000 });
    expect(await page.getByRole('heading', { name: 'Files' }).count()).toBe(0);
    await page.getByLabel('Command', { exact: true }).fill('cat notes/todo.txt');
    await page.getByRole('button', { name: 'Run', exact: true }).click();
    await page
      .getByTestId('command-exit')
      .getByText(/^Exit code 0/)
      .waitFor({ timeout: 30_000 });
    expect(await page.getByRole('log', { name: 'Command output' }).textContent()).toBe('buy milk\n');
    await state.getByText('running').waitFor();
    await page.getByRole('heading', { name: 'Files' }).waitFor();
  });

  it('is not visible to another organization (the owner sees it: the control)', { timeout: 30_000 }, async () => {
    await page.reload();
    await page.getByRole('heading', { name: 'Sandbox console-box' }).waitFor();
    const stranger = await createOrgAdmin(env.h, 'Stranger Org');
    const theirs = await signedInPage(env, stranger.key);
    await theirs.goto(`${env.url}/sandboxes/${sandboxId}`);
    await theirs.getByRole('alert').getByText('Could not load the sandbox').waitFor();
    expect(await theirs.getByText('console-box').count()).toBe(0);
    await theirs.goto(`${env.url}/sandboxes`);
    await theirs.getByText('No sandboxes yet.').waitFor();
    await theirs.context().close();
  });

  it('offers no lifecycle, upload or command controls to a read-only key', { timeout: 30_000 }, async () => {
    const key = await keyFor(env.h, env.admin, ['sandbox:read', 'templates:read']);
    const ro = await signedInPage(env, key);
    await ro.goto(`${env.url}/sandboxes`);
    await ro.getByRole('link', { name: 'console-box' }).waitFor();
    expect(await ro.getByRole('button', { name: 'Create sandbox' }).count()).toBe(0);
    expect(await ro.getByRole('button', { name: /Pause|Destroy/ }).count()).toBe(0);
    await ro.getByRole('link', { name: 'console-box' }).click();
    await ro.getByRole('heading', { name: 'Files' }).waitFor();
    await ro.getByRole('cell', { name: 'data.bin', exact: true }).waitFor();
    expect(await ro.getByLabel('Upload a file').count()).toBe(0);
    expect(await ro.getByLabel('Command', { exact: true }).count()).toBe(0);
    expect(await ro.getByRole('button', { name: 'Download data.bin' }).isVisible()).toBe(true);
    await ro.context().close();
  });

  it('destroys the sandbox after a confirmation', { timeout: 60_000 }, async () => {
    page.once('dialog', (d) => void d.dismiss());
    await page.getByRole('button', { name: 'Destroy console-box' }).click();
    // Dismissed: still running.
    expect(await page.getByTestId('sandbox-state').textContent()).toContain('running');
    page.once('dialog', (d) => void d.accept());
    await page.getByRole('button', { name: 'Destroy console-box' }).click();
    await page.getByTestId('sandbox-state').getByText('destroyed').waitFor({ timeout: 30_000 });
    expect(await page.getByRole('heading', { name: 'Files' }).count()).toBe(0);
    await page.getByRole('link', { name: '← Sandboxes' }).click();
    await page.getByText('No sandboxes yet.').waitFor();
    await page.getByLabel('State').selectOption('destroyed');
    await row('console-box').getByText('destroyed', { exact: true }).waitFor();
    expect(owner.problems).toEqual([]);
  });
});

describe('templates', () => {
  it('lists the system templates and builds one from a Dockerfile with its log streaming live', { timeout: 180_000 }, async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Templates' }).click();
    await page.getByRole('heading', { name: 'Templates', level: 1 }).waitFor();
    const table = page.getByRole('table', { name: 'Templates' });
    await table.getByText('base-ubuntu', { exact: true }).first().waitFor();
    // System templates cannot be deleted.
    expect(await page.getByRole('button', { name: 'Delete base-ubuntu' }).count()).toBe(0);

    // A bad slug is caught before it is sent; the API's own refusals show with their code.
    await page.getByLabel('Slug').fill('Bad Slug');
    await page.getByRole('button', { name: 'Build template' }).click();
    await page
      .getByRole('alert')
      .getByText(/The slug must be/)
      .waitFor();
    await page.getByLabel('Slug').fill('from-console');
    await page.getByLabel('Dockerfile').fill('FROM base-ubuntu\nCOPY . /app\n');
    await page.getByRole('button', { name: 'Build template' }).click();
    const refusal = page.getByRole('alert').filter({ hasText: 'Could not create the template' });
    await refusal.getByText(/COPY is not supported/).waitFor();
    expect(await refusal.getByText('invalid_request', { exact: true }).count()).toBe(1);

    await page.getByLabel('Display name').fill('From the console');
    await page.getByLabel('Dockerfile').fill('FROM base-ubuntu\nENV GREETING=hi\nRUN echo "built-by-console $GREETING" && sleep 4 && echo slept\n');
    await shot(page, 'templates-new');
    await page.getByRole('button', { name: 'Build template' }).click();
    await page.waitForURL('**/templates/from-console');
    await page.getByRole('heading', { name: 'Template From the console' }).waitFor();
    const log = page.getByRole('log', { name: 'Build log' });
    // The step's first line shows while the step still runs: the log is live, not read at the end.
    await log.getByText('built-by-console hi').waitFor({ timeout: 120_000 });
    expect(await page.getByTestId('build-end').textContent()).toBe('');
    expect(await log.textContent()).not.toMatch(/^slept$/m);
    await page.getByTestId('build-end').getByText('Build ready.').waitFor({ timeout: 60_000 });
    expect(await log.textContent()).toMatch(/built-by-console hi\nslept\n/);
    await page.getByTestId('template-status').getByText('ready').waitFor();
    await shot(page, 'template-build');

    // Back in the list it is ready; it is deleted from there after a confirmation.
    await page.getByRole('link', { name: '← Templates' }).click();
    const mine = table.getByRole('row').filter({ hasText: 'from-console' });
    await mine.getByText('ready', { exact: true }).waitFor();
    page.once('dialog', (d) => void d.accept());
    await page.getByRole('button', { name: 'Delete from-console' }).click();
    await page.getByText('Template from-console deleted.').waitFor();
    expect(await mine.count()).toBe(0);
    expect(owner.problems).toEqual([]);
  });
});
