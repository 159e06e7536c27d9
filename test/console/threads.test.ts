import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOrgAdmin } from '../harness.js';
import { type ConsoleEnv, shot, signIn, startConsole } from './browser.js';

describe('the web console: threads', () => {
  let env: ConsoleEnv;
  const api = async (key: string, method: string, path: string, body?: unknown) => {
    const res = await fetch(`${env.url}${path}`, {
      method,
      headers: { 'x-api-key': key, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null };
  };

  beforeAll(async () => {
    env = await startConsole();
    const agent = await api(env.admin.key, 'POST', '/v1/agents', { slug: 'greeter', model: 'test-model', instructions: 'Greet people.' });
    expect(agent.status, JSON.stringify(agent.body)).toBe(201);
  }, 120_000);
  afterAll(() => env?.close());

  let threadPath = '';

  it('opens a thread, streams the answer live as it comes, and the run ends completed', { timeout: 60_000 }, async () => {
    const { page, problems, context } = await signIn(env);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Threads' }).click();
    await page.getByText('No threads yet').waitFor();
    await page.getByLabel('Agent').selectOption({ label: 'greeter' });
    await page.getByLabel('Title (optional)').fill('Greeting thread');
    await page.getByRole('button', { name: 'Start thread' }).click();
    await page.waitForURL(/\/threads\/thr_/);
    threadPath = new URL(page.url()).pathname;
    await page.getByRole('heading', { name: 'Greeting thread' }).waitFor();
    await page.getByTestId('live-indicator').getByText('Live').waitFor();
    expect(await page.getByText('No messages yet').isVisible()).toBe(true);

    // Every text the streaming message shows, as the page shows it: proof the answer came in piece by piece.
    await page.evaluate(() => {
      const seen: string[] = [];
      (window as unknown as { seen: string[] }).seen = seen;
      new MutationObserver(() => {
        const el = document.querySelector('[data-testid="streaming-message"] > .text');
        if (el && seen.at(-1) !== el.textContent) seen.push(el.textContent ?? '');
      }).observe(document.body, { subtree: true, childList: true, characterData: true });
    });
    env.fake.script({ text: ['Hel', 'lo ', 'world'], chunkDelayMs: 150 });
    await page.getByLabel('Message').fill('Say hello');
    await page.getByRole('button', { name: 'Send' }).click();

    await page.getByTestId('streaming-message').waitFor();
    await page.getByTestId('run-status').getByText('running').waitFor();
    expect(await page.getByRole('button', { name: 'Cancel run' }).isVisible()).toBe(true);
    await page.getByTestId('assistant-message').getByText('Hello world').waitFor();
    await page.getByTestId('run-status').getByText('completed').waitFor();
    const seen = await page.evaluate(() => (window as unknown as { seen: string[] }).seen);
    expect(seen[0]).toBe('Hel');
    expect(seen).toContain('Hello ');
    expect(await page.getByTestId('streaming-message').count()).toBe(0);
    expect(await page.locator('.msg-user').getByText('Say hello').isVisible()).toBe(true);
    expect(await page.getByRole('button', { name: 'Cancel run' }).count()).toBe(0);
    expect(await page.getByLabel('Message').inputValue()).toBe('');
    await shot(page, 'thread');

    // A reload renders the durable history.
    await page.reload();
    await page.getByTestId('assistant-message').getByText('Hello world').waitFor();
    expect(await page.locator('.msg-user').getByText('Say hello').isVisible()).toBe(true);
    await page.getByTestId('run-status').getByText('completed').waitFor();
    await page.getByTestId('live-indicator').getByText('Live').waitFor();
    expect(problems).toEqual([]);
    await context.close();
  });

  it('cancels a running run with the Cancel button; the run ends cancelled', { timeout: 60_000 }, async () => {
    const { page, context } = await signIn(env);
    await page.goto(`${env.url}${threadPath}`);
    await page.getByTestId('live-indicator').getByText('Live').waitFor();
    env.fake.script({ text: ['Slow ', 'answer ', 'that ', 'takes ', 'a ', 'long ', 'time ', 'to ', 'finish.'], chunkDelayMs: 1000 });
    await page.getByRole('textbox', { name: 'Message' }).fill('Tell me a long story');
    await page.getByRole('button', { name: 'Send' }).click();
    await page.getByTestId('streaming-message').getByText('Slow', { exact: false }).waitFor();
    expect(await page.getByRole('button', { name: 'Send' }).isDisabled()).toBe(true);
    await page.getByRole('button', { name: 'Cancel run' }).click();
    await page.getByTestId('run-status').getByText('cancelled', { exact: true }).waitFor();
    await page.getByRole('button', { name: 'Cancel run' }).waitFor({ state: 'detached' });
    expect(await page.getByText('finish.').count()).toBe(0);
    await context.close();
  });

  it('lists threads with links; search filters them; archived ones only when asked', { timeout: 60_000 }, async () => {
    const other = await api(env.admin.key, 'POST', '/v1/threads', { title: 'Quarterly numbers' });
    expect(other.status).toBe(201);
    const archived = await api(env.admin.key, 'POST', '/v1/threads', { title: 'Old archived chat' });
    expect((await api(env.admin.key, 'PATCH', `/v1/threads/${archived.body.data.id}`, { archived: true })).status).toBe(200);

    const { page, context } = await signIn(env);
    await page.goto(`${env.url}/threads`);
    const table = page.getByRole('table', { name: 'Threads' });
    await table.getByRole('link', { name: 'Greeting thread' }).waitFor();
    expect(await table.getByRole('link', { name: 'Quarterly numbers' }).isVisible()).toBe(true);
    expect(await table.getByText('greeter').isVisible()).toBe(true);
    expect(await table.getByRole('link', { name: 'Old archived chat' }).count()).toBe(0);
    await shot(page, 'threads');

    await page.getByLabel('Search').fill('greet');
    await table.getByRole('link', { name: 'Quarterly numbers' }).waitFor({ state: 'detached' });
    expect(await table.getByRole('link', { name: 'Greeting thread' }).isVisible()).toBe(true);
    await page.getByLabel('Search').fill('nothing like this');
    await page.getByText('No thread matches').waitFor();
    await page.getByLabel('Search').fill('');

    await page.getByLabel('Include archived').check();
    await table.getByRole('link', { name: 'Old archived chat' }).waitFor();
    expect(await table.getByRole('row').filter({ hasText: 'Old archived chat' }).getByText('archived', { exact: true }).isVisible()).toBe(true);

    await table.getByRole('link', { name: 'Greeting thread' }).click();
    await page.waitForURL((u) => u.pathname === threadPath);
    await page.getByTestId('assistant-message').getByText('Hello world').waitFor();
    await context.close();
  });

  it('another organization’s thread never appears, and its URL answers not found', { timeout: 60_000 }, async () => {
    const stranger = await createOrgAdmin(env.h, 'Stranger Org');
    const made = await api(stranger.key, 'POST', '/v1/threads', { title: 'Stranger secrets' });
    expect(made.status).toBe(201);
    const path = `/threads/${made.body.data.id}`;

    // Control: its owner sees it in the list and opens it.
    const owner = await signIn(env, stranger.key);
    await owner.page.goto(`${env.url}/threads`);
    await owner.page.getByRole('link', { name: 'Stranger secrets' }).waitFor();
    await owner.page.goto(`${env.url}${path}`);
    await owner.page.getByRole('heading', { name: 'Stranger secrets' }).waitFor();
    await owner.context.close();

    const { page, context } = await signIn(env);
    await page.goto(`${env.url}/threads`);
    await page.getByRole('link', { name: 'Greeting thread' }).waitFor();
    expect(await page.getByText('Stranger secrets').count()).toBe(0);
    await page.goto(`${env.url}${path}`);
    const alert = page.getByRole('alert');
    await alert.waitFor();
    expect(await alert.textContent()).toMatch(/Could not load this thread/);
    expect(await alert.textContent()).toMatch(/HTTP 404/);
    expect(await page.getByTestId('request-id').textContent()).toMatch(/\S+/);
    expect(await page.getByText('Stranger secrets').count()).toBe(0);
    await context.close();
  });

  it('pages the list with Load more', { timeout: 60_000 }, async () => {
    for (let i = 0; i < 50; i++) expect((await api(env.admin.key, 'POST', '/v1/threads', { title: `Bulk ${i}` })).status).toBe(201);
    const { page, context } = await signIn(env);
    await page.goto(`${env.url}/threads`);
    const table = page.getByRole('table', { name: 'Threads' });
    await table.getByRole('link', { name: 'Bulk 49' }).waitFor();
    expect(await table.getByRole('link').count()).toBe(50);
    expect(await table.getByRole('link', { name: 'Greeting thread' }).count()).toBe(0);
    await page.getByRole('button', { name: 'Load more' }).click();
    await table.getByRole('link', { name: 'Greeting thread' }).waitFor();
    expect(await table.getByRole('link', { name: 'Quarterly numbers' }).isVisible()).toBe(true);
    await page.getByRole('button', { name: 'Load more' }).waitFor({ state: 'detached' });
    await context.close();
  });
});

describe('the thread view’s state: durable history and live frames', () => {
  const thread = {
    id: 'thr_1',
    orgId: 'org_1',
    ownerUserId: 'usr_1',
    agentId: 'agt_1',
    title: 'T',
    executionMode: 'managed' as const,
    archived: false,
    activeRolloutId: 'rol_1',
    createdAt: '2026-01-01T00:00:00Z',
    updatedAt: '2026-01-01T00:00:00Z',
  };
  const durable = (sequence: number, type: string, payload: unknown) => ({
    type,
    sequence,
    payload,
    threadId: 'thr_1',
    rolloutId: 'rol_1',
    runId: 'run_1',
    createdAt: '2026-01-01T00:00:00Z',
  });
  const origin = { threadId: 'thr_1', runId: 'run_1', rolloutId: 'rol_1', sequenceNumber: 1 };

  it('streams reasoning, text and tool output, then settles them on their durable frames; replays never duplicate', async () => {
    const { initialState, reduce, lastRunStatus } = await import('../../packages/console/src/pages/thread-state.js');
    let s = reduce(initialState, { type: 'history', thread, events: [durable(1, 'user_message', { text: 'hi' }) as never] });
    s = reduce(s, { type: 'frame', frame: { type: 'snapshot', protocol_version: 1, view: 'owner', thread, lastSequence: 1, activeRunId: null } });
    expect(s.connection).toBe('live');
    s = reduce(s, { type: 'frame', frame: durable(2, 'run_started', { runId: 'run_1', agent: 'a', model: 'm' }) });
    expect(lastRunStatus(s)).toEqual({ runId: 'run_1', status: 'running', error: null });
    s = reduce(s, { type: 'frame', frame: { type: 'tool_call_started', ...origin, toolCallId: 'c1', name: 'exec_command' } });
    s = reduce(s, { type: 'frame', frame: { type: 'tool_output_delta', ...origin, toolCallId: 'c1', delta: 'line 1\n' } });
    s = reduce(s, { type: 'frame', frame: { type: 'tool_output_delta', ...origin, toolCallId: 'c1', delta: 'line 2\n' } });
    expect(s.tools).toMatchObject([{ toolCallId: 'c1', name: 'exec_command', output: 'line 1\nline 2\n', completed: false }]);
    s = reduce(s, { type: 'frame', frame: durable(3, 'tool_call', { toolCallId: 'c1', name: 'exec_command', input: { cmd: 'ls' } }) });
    s = reduce(s, {
      type: 'frame',
      frame: durable(4, 'tool_result', { toolCallId: 'c1', name: 'exec_command', output: 'line 1\nline 2\n', isError: false }),
    });
    expect(s.tools).toEqual([]);
    s = reduce(s, { type: 'frame', frame: { type: 'assistant_thinking_delta', ...origin, messageId: 'm1', delta: 'Let me ' } });
    s = reduce(s, { type: 'frame', frame: { type: 'assistant_thinking_delta', ...origin, messageId: 'm1', delta: 'think' } });
    s = reduce(s, { type: 'frame', frame: { type: 'assistant_message_delta', ...origin, messageId: 'm1', delta: 'Hel' } });
    s = reduce(s, { type: 'frame', frame: { type: 'assistant_message_delta', ...origin, messageId: 'm1', delta: 'lo' } });
    expect(s.live).toEqual([{ messageId: 'm1', runId: 'run_1', text: 'Hello', reasoning: 'Let me think' }]);
    s = reduce(s, { type: 'frame', frame: durable(5, 'assistant_message', { messageId: 'm1', text: 'Hello', reasoning: 'Let me think' }) });
    expect(s.live).toEqual([]);
    // A late delta of a message already recorded is not streamed again; a replayed durable frame is not added twice.
    s = reduce(s, { type: 'frame', frame: { type: 'assistant_message_delta', ...origin, messageId: 'm1', delta: '!' } });
    s = reduce(s, { type: 'frame', frame: durable(5, 'assistant_message', { messageId: 'm1', text: 'Hello', reasoning: 'Let me think' }) });
    expect(s.live).toEqual([]);
    expect(s.events.map((e) => e.sequence)).toEqual([1, 2, 3, 4, 5]);
    s = reduce(s, {
      type: 'frame',
      frame: durable(6, 'run_completed', { runId: 'run_1', status: 'failed', usage: {}, iterations: 1, error: 'boom' }),
    });
    expect(s.activeRunId).toBeNull();
    expect(lastRunStatus(s)).toEqual({ runId: 'run_1', status: 'failed', error: 'boom' });
    s = reduce(s, { type: 'connection', connection: 'reconnecting' });
    s = reduce(s, { type: 'frame', frame: { type: 'thread_renamed', threadId: 'thr_1', title: 'Renamed', updatedAt: '2026-01-02T00:00:00Z' } });
    expect(s.thread?.title).toBe('Renamed');
    s = reduce(s, { type: 'frame', frame: { type: 'thread_deleted', threadId: 'thr_1', deletedAt: '2026-01-02T00:00:00Z' } });
    expect(s.connection).toBe('deleted');
  });
});
