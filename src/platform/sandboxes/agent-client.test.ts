import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FakeAgent, type FakeAgentMode } from '../../../test/fakes/agent.js';
import { AppError } from '../http/errors.js';
import { AgentClient } from './agent-client.js';

/**
 * The server's side of the agent treats it as untrusted: an agent taken over by the sandbox's user answers
 * without end, too much, or not at all, and the server must neither buffer it nor wait for it forever.
 */

let dir: string;
let fake: FakeAgent | null = null;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hangar-agent-client-'));
});
afterEach(async () => {
  await fake?.close();
  fake = null;
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const LIMITS = {
  jsonBytes: 256 << 10,
  listBytes: 1 << 20,
  errorBytes: 16 << 10,
  lineBytes: 128 << 10,
  snapshotBytes: 2 << 20,
  callMs: 400,
  fileMs: 400,
  stdinMs: 400,
  followIdleMs: 400,
};

async function against(mode: FakeAgentMode) {
  fake = await new FakeAgent(path.join(dir, `${mode}.sock`), mode).start();
  const client = new AgentClient(fake.socketPath, LIMITS);
  const violations: string[] = [];
  client.onViolation = (reason) => violations.push(reason);
  return { client, violations, fake };
}

async function failure(p: Promise<unknown>): Promise<{ err: AppError; ms: number }> {
  const t0 = Date.now();
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err, 'the call must fail').toBeInstanceOf(AppError);
  return { err: err as AppError, ms: Date.now() - t0 };
}

const drain = async (events: AsyncIterable<unknown>) => {
  for await (const _ of events) void _;
};

describe('an agent that answers without end or too much', () => {
  it('a chunked 200 that never ends: the client stops at the cap, hangs up, and reports sandbox_agent_error', async () => {
    const { client, violations, fake } = await against('endless-chunked');
    const { err, ms } = await failure(client.listProcesses());
    expect(err.code).toBe('sandbox_agent_error');
    expect(err.status).toBe(502);
    expect(err.message).toMatch(/more than 1048576 bytes/);
    expect(ms).toBeLessThan(5_000);
    expect(violations).toHaveLength(1);
    // Bounded: what the agent managed to write is the cap plus what the socket buffers hold.
    await expect.poll(() => fake.hangups).toBeGreaterThanOrEqual(1);
    expect(fake.written).toBeLessThan(LIMITS.listBytes + (4 << 20));
    client.close();
  });

  it('a Content-Length of 1 GiB is refused before reading the body', async () => {
    const { client, violations, fake } = await against('huge');
    const { err } = await failure(client.getProcess(1));
    expect(err.code).toBe('sandbox_agent_error');
    expect(err.message).toMatch(/announced 1073741824 bytes/);
    expect(violations).toHaveLength(1);
    await expect.poll(() => fake.hangups).toBeGreaterThanOrEqual(1);
    expect(fake.written).toBeLessThan(4 << 20);
    client.close();
  });

  it('an error answer that never ends is cut at the error cap', async () => {
    const { client, violations } = await against('endless-error');
    const { err } = await failure(client.signal(1, 'SIGTERM'));
    expect(err.code).toBe('sandbox_agent_error');
    expect(violations).toHaveLength(1);
    client.close();
  });

  it('an output line that never ends is cut at the line cap, in a snapshot and in a follow stream', async () => {
    for (const follow of [false, true]) {
      const { client, violations, fake } = await against('endless-line');
      const { err, ms } = await failure(drain(client.output(1, { follow })));
      expect(err.code).toBe('sandbox_agent_error');
      expect(err.message).toMatch(/line longer than 131072 bytes/);
      expect(ms).toBeLessThan(5_000);
      expect(violations).toHaveLength(1);
      expect(fake.written).toBeLessThan(LIMITS.lineBytes + (4 << 20));
      client.close();
      await fake.close();
    }
  });

  it('a body that is not JSON, or not the expected shape, is a violation', async () => {
    const { client, violations } = await against('not-json');
    expect((await failure(client.startProcess({ cmd: 'true' }))).err.code).toBe('sandbox_agent_error');
    expect(violations[0]).toMatch(/not JSON/);
    client.close();
  });
});

describe('an agent that does not answer', () => {
  it('a call about processes fails at its deadline as a violation', async () => {
    const { client, violations } = await against('silent');
    const { err, ms } = await failure(client.getProcess(1));
    expect(err.code).toBe('sandbox_agent_error');
    expect(ms).toBeGreaterThanOrEqual(350);
    expect(ms).toBeLessThan(5_000);
    expect(violations).toHaveLength(1);
    client.close();
  });

  it('an output stream without headers fails at the deadline too', async () => {
    const { client, violations } = await against('silent');
    const { err } = await failure(drain(client.output(1, { follow: true })));
    expect(err.code).toBe('sandbox_agent_error');
    expect(violations).toHaveLength(1);
    client.close();
  });

  it('a file operation (which may be slow for honest reasons) fails with 503 but is no violation', async () => {
    const { client, violations } = await against('silent');
    const { err } = await failure(client.remove('/home/user/big', true));
    expect(err.code).toBe('service_unavailable');
    expect(violations).toHaveLength(0);
    client.close();
  });
});

describe('a follow stream', () => {
  it('of an agent that sends keepalives lasts as long as the process, longer than the idle timeout', async () => {
    const { client, violations, fake } = await against('keepalives');
    fake.lines = 1;
    fake.quietMs = 1_200; // three idle timeouts of quiet, filled with keepalives
    const events: Array<{ type: string }> = [];
    for await (const ev of client.output(1, { follow: true })) events.push(ev);
    expect(events.map((e) => e.type)).toEqual(['stdout', 'exit']);
    expect(violations).toEqual([]);
    client.close();
  });

  it('is not cut when the server is the slow one (a slow reader downstream)', async () => {
    const { client, violations, fake } = await against('keepalives');
    fake.lines = 3;
    fake.quietMs = 50;
    const events: Array<{ type: string }> = [];
    for await (const ev of client.output(1, { follow: true })) {
      events.push(ev);
      await new Promise((r) => setTimeout(r, 500)); // longer than the idle timeout between reads
    }
    expect(events.map((e) => e.type)).toEqual(['stdout', 'stdout', 'stdout', 'exit']);
    expect(violations).toEqual([]);
    client.close();
  });

  it('of an agent that announced keepalives and went silent fails after the idle timeout', async () => {
    const { client, violations } = await against('keepalive-then-silent');
    const t0 = Date.now();
    const seen: string[] = [];
    const err = await (async () => {
      for await (const ev of client.output(1, { follow: true })) seen.push(ev.type);
    })().then(
      () => null,
      (e: unknown) => e as AppError,
    );
    expect(seen).toEqual(['stdout']);
    expect(err?.code).toBe('sandbox_agent_error');
    expect(err?.message).toMatch(/sent nothing for/);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(350);
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(violations).toHaveLength(1);
    client.close();
  });
});
