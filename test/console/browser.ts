import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import { FakeOpenAI } from '../fakes/openai.js';
import { createHarness, createOrgAdmin, type Actor, type Harness } from '../harness.js';

/** Debian's Chromium, installed by the setup script (browser downloads are not possible here). */
export const CHROMIUM = process.env.HANGAR_TEST_CHROMIUM ?? '/usr/bin/chromium';

/** Where screenshots go (kept by CI as artifacts; README's come from here). */
export const ARTIFACTS = path.resolve('test-artifacts/console');

export interface ConsoleEnv {
  h: Harness;
  /** The console's address, e.g. http://127.0.0.1:40123 */
  url: string;
  /** An organization admin with an all-scopes key (`admin.key`). */
  admin: Actor;
  /** The scripted OpenAI-compatible provider behind the platform model `test-model`. */
  fake: FakeOpenAI;
  browser: Browser;
  close(): Promise<void>;
}

/**
 * A real app listening on loopback with the built console (packages/console/dist, built by the setup script), a
 * platform model `test-model` served by the scripted fake, an org admin, and headless Chromium.
 */
export async function startConsole(env: Record<string, string> = {}): Promise<ConsoleEnv> {
  const fake = await new FakeOpenAI().start();
  const dir = mkdtempSync(path.join(tmpdir(), 'hangar-console-'));
  const models = path.join(dir, 'models.json');
  writeFileSync(models, JSON.stringify({ platform: [{ id: 'test-model', provider: 'openai', model: 'gpt-4o-mini', contextWindow: 32000 }] }));
  const h = await createHarness({ HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_MODELS_FILE: models, ...env });
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = h.app.server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  const admin = await createOrgAdmin(h, 'Console Org');
  const browser = await launchBrowser();
  return {
    h,
    url,
    admin,
    fake,
    browser,
    async close() {
      await browser.close().catch(() => undefined);
      await h.close();
      await fake.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    // Without the background-networking flags Chromium keeps dialling Google's hosts, which this network refuses.
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

export interface SignedIn {
  page: Page;
  context: BrowserContext;
  /** Content-Security-Policy violations and page errors seen so far (a test may assert there are none). */
  problems: string[];
}

/** A fresh browser context (no shared storage) signed in at / with `credential` (default: the admin's key). */
export async function signedInPage(env: ConsoleEnv, credential = env.admin.key, viewport = { width: 1280, height: 900 }): Promise<Page> {
  return (await signIn(env, credential, viewport)).page;
}

export async function signIn(env: ConsoleEnv, credential = env.admin.key, viewport = { width: 1280, height: 900 }): Promise<SignedIn> {
  const context = await env.browser.newContext({ viewport, acceptDownloads: true });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|Refused to/i.test(m.text())) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  await page.goto(env.url);
  await page.getByLabel('API key or session token').fill(credential);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
  return { page, context, problems };
}

/** Saves a full-page screenshot as test-artifacts/console/<name>.png. */
export async function shot(page: Page, name: string): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}
