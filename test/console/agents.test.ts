import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addOrgMember, createOrgAdmin, keyFor } from '../harness.js';
import { type ConsoleEnv, shot, signIn, startConsole } from './browser.js';

describe('the web console: agents', () => {
  let env: ConsoleEnv;
  beforeAll(async () => {
    env = await startConsole();
  }, 120_000);
  afterAll(() => env?.close());

  const api = async (path: string, key = env.admin.key) => {
    const res = await fetch(`${env.url}${path}`, { headers: { 'x-api-key': key } });
    return { status: res.status, body: (await res.json()) as any };
  };

  it('creates an agent with test-model, lists it, edits its instructions and runs it against the scripted model', { timeout: 90_000 }, async () => {
    const { page, context, problems } = await signIn(env);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Agents' }).click();
    await page.getByText('No agents yet.').waitFor();
    await page.getByRole('link', { name: 'New agent' }).click();
    await page.waitForURL(/\/agents\/new$/);

    // The model select is filled from GET /v1/models/available; the template from GET /v1/templates once in_sandbox.
    const model = page.getByLabel('Model');
    await model.locator('option[value="test-model"]').waitFor({ state: 'attached' });
    await page.getByLabel('Slug').fill('helper');
    await page.getByLabel('Name').fill('Helper');
    await page.getByLabel('Instructions').fill('Be brief.');
    await model.selectOption('test-model');
    await page.getByLabel('Execution mode').selectOption('in_sandbox');
    await page.getByLabel('Sandbox template').locator('option[value="base-ubuntu"]').waitFor({ state: 'attached' });
    await page.getByLabel('Execution mode').selectOption('managed');
    // Sandbox tools cannot be ticked for a managed agent.
    expect(await page.getByRole('checkbox', { name: /exec_command/ }).isDisabled()).toBe(true);
    await shot(page, 'agent-new');
    await page.getByRole('button', { name: 'Create agent' }).click();
    await page.waitForURL(/\/agents\/helper$/);
    await page.getByRole('heading', { name: 'Helper', level: 1 }).waitFor();

    // The API has it as the form said.
    const created = await api('/v1/agents/helper');
    expect(created.status).toBe(200);
    expect(created.body.data).toMatchObject({
      slug: 'helper',
      name: 'Helper',
      model: 'test-model',
      instructions: 'Be brief.',
      executionMode: 'managed',
    });

    // Listed.
    await page.getByRole('link', { name: '← Agents' }).click();
    await page.waitForURL(/\/agents$/);
    const row = page.getByRole('table', { name: 'Agents' }).getByRole('row', { name: /helper/ });
    await row.waitFor();
    expect(await row.textContent()).toContain('test-model');
    await shot(page, 'agents-list');

    // Edit the instructions.
    await row.getByRole('link', { name: 'Helper' }).click();
    await page.waitForURL(/\/agents\/helper$/);
    const instructions = page.getByLabel('Instructions');
    expect(await instructions.inputValue()).toBe('Be brief.');
    await instructions.fill('Answer every question with the number 42.');
    await page.getByRole('button', { name: 'Save changes' }).click();
    await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
    expect((await api('/v1/agents/helper')).body.data.instructions).toBe('Answer every question with the number 42.');
    await page.reload();
    await page.getByLabel('Instructions').waitFor();
    expect(await page.getByLabel('Instructions').inputValue()).toBe('Answer every question with the number 42.');

    // Run it: the scripted model answers, the answer streams into the page, and the thread is a link away.
    const before = env.fake.requests.length;
    env.fake.script({ text: ['The answer ', 'is 42'], usage: { prompt: 40, completion: 6 } });
    await page.getByLabel('Prompt').fill('What is six times seven?');
    await page.getByRole('button', { name: 'Run', exact: true }).click();
    const answer = page.getByTestId('run-answer');
    await answer.filter({ hasText: 'The answer is 42' }).waitFor();
    await page.locator('.run-output .badge', { hasText: 'completed' }).waitFor();
    expect(await page.locator('.run-output').textContent()).toContain('46 tokens');
    // The model got the edited instructions and the prompt.
    const sent = JSON.stringify(env.fake.requests.slice(before).map((r) => r.body.messages));
    expect(sent).toContain('Answer every question with the number 42.');
    expect(sent).toContain('What is six times seven?');
    const threadLink = page.getByRole('link', { name: 'Open the thread' });
    const href = await threadLink.getAttribute('href');
    expect(href).toMatch(/^\/threads\/thr_/);
    // The thread holds the run's messages (the API's own record of it).
    const events = await api(`/v1/threads/${href!.split('/').pop()}/events`);
    expect(events.status).toBe(200);
    expect(JSON.stringify(events.body.data)).toContain('The answer is 42');
    await shot(page, 'agent-run');
    expect(problems).toEqual([]);
    await context.close();
  });

  it('a run the model fails shows the failure with its reason', { timeout: 60_000 }, async () => {
    const { page, context } = await signIn(env);
    await page.goto(`${env.url}/agents/helper`);
    env.fake.script({ status: 400, errorMessage: 'the scripted model refuses' });
    await page.getByLabel('Prompt').fill('Fail, please.');
    await page.getByRole('button', { name: 'Run', exact: true }).click();
    const alert = page.locator('.run-output [role="alert"]');
    await alert.waitFor();
    expect(await alert.textContent()).toMatch(/failed/);
    await page.locator('.run-output .badge', { hasText: 'failed' }).waitFor();
    await context.close();
  });

  it('a member key without agent:write sees the agents but no create, save or delete; the API refuses it too', { timeout: 60_000 }, async () => {
    const member = await addOrgMember(env.h, env.admin);
    const key = await keyFor(env.h, member, ['agent:read', 'agent:run', 'models:use']);
    // Control: the key reads agents; the API refuses it a write.
    expect((await api('/v1/agents', key)).status).toBe(200);
    const refused = await fetch(`${env.url}/v1/agents`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ slug: 'nope' }),
    });
    expect(refused.status).toBe(403);

    const { page, context } = await signIn(env, key);
    await page.goto(`${env.url}/agents`);
    await page.getByRole('table', { name: 'Agents' }).getByRole('link', { name: 'Helper' }).waitFor();
    expect(await page.getByRole('link', { name: 'New agent' }).count()).toBe(0);
    await page.getByText(/lacks agent:write/).waitFor();
    await shot(page, 'agents-list-read-only');

    await page.getByRole('link', { name: 'Helper' }).click();
    await page.getByText('Answer every question with the number 42.').waitFor();
    expect(await page.getByRole('button', { name: 'Save changes' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Delete' }).count()).toBe(0);
    // It may still run the agent (agent:run).
    await page.getByLabel('Prompt').waitFor();

    await page.goto(`${env.url}/agents/new`);
    await page.getByText(/needs the agent:write scope/).waitFor();
    expect(await page.getByLabel('Slug').count()).toBe(0);
    await context.close();
  });

  it('another organization does not see the agent: its page shows the API’s not-found error', { timeout: 60_000 }, async () => {
    const other = await createOrgAdmin(env.h, 'Other Agents Org');
    // Control: the owner's key gets it.
    expect((await api('/v1/agents/helper')).status).toBe(200);
    expect((await api('/v1/agents/helper', other.key)).status).toBe(404);
    const { page, context } = await signIn(env, other.key);
    await page.goto(`${env.url}/agents`);
    await page.getByText('No agents yet.').waitFor();
    await page.goto(`${env.url}/agents/helper`);
    const alert = page.getByRole('alert');
    await alert.waitFor();
    expect(await alert.textContent()).toMatch(/Could not load the agent/);
    expect(await alert.textContent()).toContain('not_found');
    await context.close();
  });

  it('deletes an agent after confirming; dismissing the confirmation keeps it', { timeout: 60_000 }, async () => {
    const made = await fetch(`${env.url}/v1/agents`, {
      method: 'POST',
      headers: { 'x-api-key': env.admin.key, 'content-type': 'application/json' },
      body: JSON.stringify({ slug: 'doomed', model: 'test-model' }),
    });
    expect(made.status).toBe(201);
    const { page, context } = await signIn(env);
    await page.goto(`${env.url}/agents/doomed`);
    await page.getByRole('heading', { name: 'doomed', level: 1 }).waitFor();
    page.once('dialog', (d) => void d.dismiss());
    await page.getByRole('button', { name: 'Delete' }).click();
    expect((await api('/v1/agents/doomed')).status).toBe(200);
    page.once('dialog', (d) => void d.accept());
    await page.getByRole('button', { name: 'Delete' }).click();
    await page.waitForURL(/\/agents$/);
    await page.getByRole('table', { name: 'Agents' }).waitFor();
    expect(await page.getByRole('link', { name: 'doomed' }).count()).toBe(0);
    expect((await api('/v1/agents/doomed')).status).toBe(404);
    await context.close();
  });
});
