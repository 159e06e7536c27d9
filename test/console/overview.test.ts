import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addOrgMember, keyFor } from '../harness.js';
import { type ConsoleEnv, shot, signIn, startConsole } from './browser.js';

describe('the web console: overview', () => {
  let env: ConsoleEnv;
  beforeAll(async () => {
    env = await startConsole();
  }, 120_000);
  afterAll(() => env?.close());

  const call = async (method: string, path: string, body?: unknown, key = env.admin.key) => {
    const res = await fetch(`${env.url}${path}`, {
      method,
      headers: { 'x-api-key': key, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, body: (await res.json()) as any };
  };

  it('after some usage, shows the balance, the period’s usage, the daily chart, recent runs and failures', { timeout: 90_000 }, async () => {
    expect((await call('POST', '/v1/agents', { slug: 'helper', model: 'test-model' })).status).toBe(201);
    env.fake.script({ text: 'The answer is 42', usage: { prompt: 120, completion: 30 } });
    const ran = await call('POST', '/v1/run', { agent: 'helper', prompt: 'What is six times seven?' });
    expect(ran.status).toBe(200);
    expect(ran.body.data).toMatchObject({ status: 'completed', usage: { totalTokens: 150 } });
    env.fake.script({ status: 400, errorMessage: 'the scripted model refuses' });
    const failed = await call('POST', '/v1/run', { agent: 'helper', prompt: 'Fail, please.' });
    expect(failed.body.data.status).toBe('failed');

    // What the API says, to compare with what the page shows.
    const credits = await call('GET', '/v1/billing/credits');
    expect(credits.status).toBe(200);
    const usage = await call('GET', '/v1/billing/my-usage?all=true');
    expect(usage.status).toBe(200);
    const tokens: number = usage.body.data.organization.tokens.totalTokens;
    expect(tokens).toBeGreaterThanOrEqual(150);

    const { page, context, problems } = await signIn(env);
    await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
    const balance = page.getByTestId('credits-card');
    await balance.locator('.value').waitFor();
    expect(await balance.textContent()).toContain((credits.body.data.balanceCents / 100).toFixed(2));
    const tokensCard = page.getByTestId('tokens-card');
    await tokensCard.locator('.value').waitFor();
    expect(await tokensCard.locator('.value').textContent()).toBe(tokens.toLocaleString('en-US'));
    expect(await page.getByRole('heading', { name: /The organization’s usage this period/ }).count()).toBe(1);

    // The chart: an image named by its summary, and the same numbers in a table.
    const chart = page.getByRole('img', { name: /Tokens, sandbox time and tool executions by day this period/ });
    await chart.waitFor();
    const summary = await chart.getAttribute('aria-label');
    // The meter's figures by day: the day's tokens are the organization's tokens (all made today).
    const daily = await call('GET', '/v1/billing/my-usage?all=true&daily=true');
    expect(daily.body.data.days.at(-1).totalTokens).toBe(tokens);
    expect(summary).toContain(`Model tokens: ${tokens.toLocaleString('en-US')} in all`);
    expect(await chart.locator('rect.s1').count()).toBeGreaterThan(0);
    const today = new Date().getUTCDate();
    expect(await page.locator('.daily-chart tbody tr').count()).toBe(today);
    await page.getByText('Data table').click();
    const lastRow = page.locator('.daily-chart tbody tr').last();
    await lastRow.waitFor();
    expect(await lastRow.locator('td').first().textContent()).toBe(tokens.toLocaleString('en-US'));

    // Recent runs and failures, from the activity feed.
    const runs = page.getByRole('table', { name: 'Recent runs' });
    await runs.getByText('Run of helper completed').waitFor();
    await runs.getByText('Run of helper failed').waitFor();
    const failures = page.getByRole('region', { name: 'Recent failures' });
    await failures.getByText('Run of helper failed').waitFor();
    // A run links to its thread.
    expect(await runs.getByRole('link', { name: 'Run of helper completed' }).getAttribute('href')).toBe(`/threads/${ran.body.data.threadId}`);
    await page.getByText('No sandbox is running.').waitFor();
    await shot(page, 'overview');
    expect(problems).toEqual([]);
    await context.close();

    // On a phone's width the chart scrolls sideways inside its own region; the page does not.
    const narrow = await signIn(env, env.admin.key, { width: 390, height: 844 });
    await narrow.page.getByRole('img', { name: /by day this period/ }).waitFor();
    expect(await narrow.page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await shot(narrow.page, 'overview-narrow');
    await narrow.context.close();
  });

  it('a narrow member key sees its own usage and a note for each card its scopes do not reach', { timeout: 60_000 }, async () => {
    const member = await addOrgMember(env.h, env.admin);
    const key = await keyFor(env.h, member, ['usage:read']);
    // Control: the key reads its usage; the balance is refused to it.
    expect((await call('GET', '/v1/billing/my-usage', undefined, key)).status).toBe(200);
    expect((await call('GET', '/v1/billing/credits', undefined, key)).status).toBe(403);

    const { page, context } = await signIn(env, key);
    await page.getByRole('heading', { name: /Your usage this period/ }).waitFor();
    await page.getByTestId('tokens-card').locator('.value').waitFor();
    expect(await page.getByTestId('tokens-card').locator('.value').textContent()).toBe('0');
    expect(await page.getByTestId('credits-card').textContent()).toMatch(/Organization admins see the balance/);
    // This key reads its usage, so its own chart shows; the lists it cannot read say which scope they need.
    await page.getByRole('img', { name: /by day/ }).waitFor();
    await page.getByText(/Recent runs \(from the activity feed\) needs the activity:read scope/).waitFor();
    await page.getByText(/The list of sandboxes needs the sandbox:read scope/).waitFor();
    expect(await page.getByRole('alert').count()).toBe(0);
    await shot(page, 'overview-narrow-key');
    await context.close();
  });
});
