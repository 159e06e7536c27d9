import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOrgAdmin, json } from '../harness.js';
import { type ConsoleEnv, shot, signedInPage, startConsole } from './browser.js';

let env: ConsoleEnv;
let page: Page;
const AGENTS = 260;
const SECRETS = 12;
const UPDATED = ['agent-007', 'agent-042', 'agent-123'];

const rows = (p: Page) => p.getByTestId('activity-event');
const url = (p: Page) => new URL(p.url());

/** Waits until the list shows exactly `n` events (the count line under the table says so). */
async function expectShown(p: Page, n: number) {
  await p
    .getByTestId('activity-count')
    .getByText(new RegExp(`^${n} events? shown`))
    .waitFor();
  expect(await rows(p).count()).toBe(n);
}

beforeAll(async () => {
  env = await startConsole();
  const { h, admin } = env;
  // A few hundred events over the API: agents created, some updated, secrets stored.
  for (let i = 1; i <= AGENTS; i++) {
    const slug = `agent-${String(i).padStart(3, '0')}`;
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: admin.headers, payload: { slug, name: `Agent ${i}` } });
    expect(res.statusCode, res.body).toBe(201);
  }
  for (const slug of UPDATED) {
    const res = await h.app.inject({ method: 'PATCH', url: `/v1/agents/${slug}`, headers: admin.headers, payload: { description: 'changed' } });
    expect(res.statusCode, res.body).toBe(200);
  }
  for (let i = 1; i <= SECRETS; i++) {
    const res = await h.app.inject({ method: 'POST', url: '/v1/secrets', headers: admin.headers, payload: { name: `KEY_${i}`, value: `v${i}` } });
    expect(res.statusCode, res.body).toBe(201);
  }
  page = await signedInPage(env);
}, 180_000);

afterAll(async () => {
  await env?.close();
});

describe('activity page', () => {
  it('lists the newest events and pages with Load more', { timeout: 60_000 }, async () => {
    await page.goto(`${env.url}/activity`);
    await page.getByRole('heading', { name: 'Activity' }).waitFor();
    await expectShown(page, 50);
    // Newest first: the last secrets stored come before the agents.
    await expect(rows(page).first().textContent()).resolves.toContain('secret');
    await shot(page, 'activity');
    await page.getByRole('button', { name: 'Load more' }).click();
    await expectShown(page, 100);
    await page.getByRole('button', { name: 'Load more' }).click();
    await expectShown(page, 150);
    // Each page's events are new ones, not the first page again.
    expect(new Set(await rows(page).allTextContents()).size).toBe(150);
  });

  it('filters by resource type (a select) and keeps the filter in the URL across a reload', { timeout: 60_000 }, async () => {
    await page.goto(`${env.url}/activity`);
    await expectShown(page, 50);
    await page.getByLabel('Resource type').selectOption('secret');
    await expectShown(page, SECRETS);
    expect(url(page).searchParams.get('resource_type')).toBe('secret');
    for (const text of await rows(page).allTextContents()) expect(text).toContain('secret.created');
    await page.reload();
    await expectShown(page, SECRETS);
    await expect(page.getByLabel('Resource type').inputValue()).resolves.toBe('secret');
    await page.getByRole('button', { name: 'Clear filters' }).click();
    await expectShown(page, 50);
    expect(url(page).search).toBe('');
  });

  it('filters by event type (a text field), by severity and by time', { timeout: 60_000 }, async () => {
    await page.goto(`${env.url}/activity`);
    await expectShown(page, 50);
    await page.getByLabel('Event type').fill('agent.updated');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await expectShown(page, UPDATED.length);
    expect(url(page).searchParams.get('event_type')).toBe('agent.updated');
    await shot(page, 'activity-filtered');

    // Severity on top of the event type: none of these is an error.
    await page.getByLabel('Severity').selectOption('error');
    await page.getByText('No events match these filters.').waitFor();
    expect(url(page).searchParams.get('severity')).toBe('error');
    expect(url(page).searchParams.get('event_type')).toBe('agent.updated');
    await page.getByLabel('Severity').selectOption('info');
    await expectShown(page, UPDATED.length);

    // Until a time long before any of it: nothing; since then: everything again.
    await page.getByRole('button', { name: 'Clear filters' }).click();
    await expectShown(page, 50);
    await page.getByLabel('Until').fill('2020-01-01T00:00');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await page.getByText('No events match these filters.').waitFor();
    expect(new Date(url(page).searchParams.get('until')!).getFullYear()).toBe(2020);
    await page.getByLabel('Until').fill('');
    await page.getByLabel('Since').fill('2020-01-01T00:00');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await expectShown(page, 50);
    expect(url(page).searchParams.get('until')).toBeNull();
    expect(url(page).searchParams.get('since')).not.toBeNull();

    // The ids an event relates to are under "More filters".
    await page.getByText('More filters').click();
    await page.getByLabel('Thread id').fill('thr_none_of_these');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await page.getByText('No events match these filters.').waitFor();
    expect(url(page).searchParams.get('thread_id')).toBe('thr_none_of_these');
    await page.reload();
    await expect(page.getByLabel('Thread id').inputValue()).resolves.toBe('thr_none_of_these');
    await page.getByText('No events match these filters.').waitFor();
    await page.getByLabel('Thread id').fill('');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await expectShown(page, 50);

    // The page size is a filter too.
    await page.getByLabel('Page size').selectOption('200');
    await expectShown(page, 200);
    expect(url(page).searchParams.get('limit')).toBe('200');
  });

  it('filters by resource id and by actor, and a shared URL opens filtered', { timeout: 60_000 }, async () => {
    const list = await env.h.app.inject({ method: 'GET', url: '/v1/agents', headers: env.admin.headers });
    const agent = json(list).data.find((a: { slug: string }) => a.slug === 'agent-042');
    const fresh = await signedInPage(env);
    await fresh.goto(`${env.url}/activity?resource_type=agent&resource_id=${agent.id}`);
    await expectShown(fresh, 2); // created and updated
    await expect(fresh.getByLabel('Resource id').inputValue()).resolves.toBe(agent.id);

    // Actor: the admin did everything; a made-up user did nothing.
    await fresh.getByRole('button', { name: 'Clear filters' }).click();
    await fresh.getByLabel('Actor user id').fill(env.admin.userId);
    await fresh.getByRole('button', { name: 'Apply filters' }).click();
    await expectShown(fresh, 50);
    expect(url(fresh).searchParams.get('actor_user_id')).toBe(env.admin.userId);
    await fresh.context().close();
  });

  it('links an event to the resource it is about', { timeout: 60_000 }, async () => {
    await page.goto(`${env.url}/activity?event_type=agent.updated`);
    await expectShown(page, UPDATED.length);
    const link = rows(page).first().getByRole('link');
    await link.click();
    await page.waitForURL((u) => u.pathname === `/agents/${UPDATED.at(-1)}`);
    // Secrets have no page in the console: plain text, no link.
    await page.goto(`${env.url}/activity?resource_type=secret`);
    await expectShown(page, SECRETS);
    expect(await rows(page).first().getByRole('link').count()).toBe(0);
  });

  it('never shows another organization’s events', { timeout: 60_000 }, async () => {
    const other = await createOrgAdmin(env.h, 'Other Activity Org');
    const res = await env.h.app.inject({ method: 'POST', url: '/v1/agents', headers: other.headers, payload: { slug: 'elsewhere-agent' } });
    expect(res.statusCode, res.body).toBe(201);
    // Control: the owner sees their event in their console.
    const owner = await signedInPage(env, other.key);
    await owner.goto(`${env.url}/activity?resource_type=agent`);
    await owner.getByText('Agent elsewhere-agent created').waitFor();
    await owner.context().close();
    // Our admin, even filtering on the other organization's admin as actor, sees none of it.
    await page.goto(`${env.url}/activity?resource_type=agent&limit=200`);
    await expectShown(page, 200);
    expect(await page.getByText('elsewhere-agent').count()).toBe(0);
    await page.goto(`${env.url}/activity?actor_user_id=${other.userId}`);
    await page.getByRole('button', { name: 'Apply filters' }).waitFor();
    await page.waitForFunction(() => !document.querySelector('.loading'));
    expect(await page.getByText('elsewhere-agent').count()).toBe(0);
  });
});
