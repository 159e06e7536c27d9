import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { FakeOpenAI } from './fakes/openai.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from './harness.js';
import { until } from './helpers.js';

const BIN = path.resolve(import.meta.dirname, '../bin/hangar.js');

/** A `hangar device …` child process, with its output collected. */
function device(args: string[], env: Record<string, string>) {
  const child = spawn(process.execPath, [BIN, 'device', ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d) => {
    out += String(d);
  });
  child.stderr!.on('data', (d) => {
    out += String(d);
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => out, exited };
}

describe('hangar device: link a machine, run a local-device agent on it, revoke it (real processes)', () => {
  let h: Harness;
  let fake: FakeOpenAI;
  let admin: Actor;
  let base: string;
  let configDir: string;
  let workspace: string;
  const children: ChildProcess[] = [];
  const env = () => ({ HANGAR_DEVICE_CONFIG_DIR: configDir, HANGAR_URL: base });

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'm1',
      HANGAR_RUNMESH_POLL_INTERVAL_SECONDS: '1',
    });
    await h.app.listen({ host: '127.0.0.1', port: 0 });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    admin = await createOrgAdmin(h);
    configDir = mkdtempSync(path.join(tmpdir(), 'hangar-device-config-'));
    workspace = mkdtempSync(path.join(tmpdir(), 'hangar-device-ws-'));
  });
  afterAll(async () => {
    for (const c of children) c.kill('SIGKILL');
    await h.close();
    await fake.stop();
    rmSync(configDir, { recursive: true, force: true });
    rmSync(workspace, { recursive: true, force: true });
  });

  it('links with two commands’ worth of steps, runs an agent that edits a file in the workspace, live on the thread’s WebSocket, then is renamed and revoked', async () => {
    // 1. `hangar device link`: prints the code and URL, waits for approval, stores the credential 0600.
    const link = device(['link', '--label', 'test-laptop'], env());
    children.push(link.child);
    const code = (await until('the code is printed', () => /code ([A-Z2-9]{4}-[A-Z2-9]{4})/.exec(link.output())?.[1], 30_000))!;
    // The server's approval URL: the web console's /link page where the console is built, else the plain /device page.
    expect([`${base}/link/${code}`, `${base}/device?code=${code}`].some((u) => link.output().includes(u))).toBe(true);
    const details = json(await h.app.inject({ method: 'GET', url: `/v1/runmesh/devices/link/${code}`, headers: admin.headers })).data;
    expect(details).toMatchObject({ deviceLabel: 'test-laptop', status: 'pending' });
    const approved = await h.app.inject({ method: 'POST', url: '/v1/runmesh/devices/link/approve', headers: admin.headers, payload: { code } });
    expect(approved.statusCode, approved.body).toBe(200);
    const nodeId = json(approved).data.node.id as string;
    expect(await link.exited, link.output()).toBe(0);
    const file = path.join(configDir, 'device.json');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const saved = JSON.parse(readFileSync(file, 'utf8'));
    expect(saved).toMatchObject({ nodeId, url: base });
    expect(saved.deviceToken).toMatch(/^hgd_/);
    // The server has the public key, never the private one.
    expect(json(approved).data.node.publicKey).toBe(saved.publicKey);
    expect(
      JSON.stringify(json(await h.app.inject({ method: 'GET', url: `/v1/runmesh/nodes/${nodeId}`, headers: admin.headers })).data),
    ).not.toContain(saved.privateKey);

    // 2. `hangar device run`: online.
    const run = device(['run', '--workspace', workspace], env());
    children.push(run.child);
    await until(
      'the node is online',
      async () => json(await h.app.inject({ method: 'GET', url: `/v1/runmesh/nodes/${nodeId}`, headers: admin.headers })).data.online,
      30_000,
    );
    // (Not spawnSync: this process is the server.)
    const status = device(['status', '--json'], env());
    expect(await status.exited, status.output()).toBe(0);
    expect(JSON.parse(status.output())).toMatchObject({ id: nodeId, status: 'active', online: true });

    // 3. A local-device agent whose model writes and runs a file in the device's workspace.
    await h.app.inject({
      method: 'POST',
      url: '/v1/agents',
      headers: admin.headers,
      payload: { slug: 'on-my-laptop', executionMode: 'local-desktop', targetDeviceId: nodeId, model: 'm1', tools: ['exec_command', 'apply_patch'] },
    });
    fake.script(
      {
        toolCalls: [
          { id: 'call_w', name: 'exec_command', arguments: JSON.stringify({ cmd: 'printf "print(6*7)\\n" > answer.py && python3 answer.py' }) },
        ],
      },
      { text: ['The answer ', 'is 42.'] },
    );
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/run',
      headers: admin.headers,
      payload: { agent: 'on-my-laptop', prompt: 'What is 6*7? Use Python.' },
    });
    expect(res.statusCode, res.body).toBe(200);
    const started = json(res).data;
    expect(started.status).toBe('registered');

    // Watch it live on the thread's WebSocket.
    const frames: any[] = [];
    const ws = new WebSocket(`${base.replace('http', 'ws')}/v1/threads/${started.threadId}/events?api_key=${admin.key}`);
    ws.on('message', (d) => frames.push(JSON.parse(String(d))));
    await until('the run completed', () => frames.find((f) => f.type === 'run_completed'), 60_000);
    ws.close();
    const final = json(await h.app.inject({ method: 'GET', url: `/v1/runs/${started.runId}`, headers: admin.headers })).data;
    expect(final, run.output()).toMatchObject({ status: 'completed', result: 'The answer is 42.' });
    expect(readFileSync(path.join(workspace, 'answer.py'), 'utf8')).toBe('print(6*7)\n');
    const types = frames.map((f) => f.type);
    expect(types).toEqual(
      expect.arrayContaining(['tool_call', 'tool_output_delta', 'tool_result', 'assistant_message_delta', 'assistant_message', 'run_completed']),
    );
    const result = frames.find((f) => f.type === 'tool_result');
    expect(result.payload.output).toContain('42');
    // The model saw the tool's output (the device's loop sent it back through the platform).
    expect(JSON.stringify(fake.requests.at(-1)!.body.messages)).toContain('42');
    // Durable frames came through the thread's one writer: consecutive sequences.
    const seqs = frames.filter((f) => typeof f.sequence === 'number').map((f) => f.sequence);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));

    // 4. Rename, then revoke: the device stops, saying why.
    const renamed = await h.app.inject({
      method: 'PATCH',
      url: `/v1/runmesh/nodes/${nodeId}`,
      headers: admin.headers,
      payload: { name: 'Ada’s laptop' },
    });
    expect(json(renamed).data.name).toBe('Ada’s laptop');
    await h.app.inject({ method: 'POST', url: `/v1/runmesh/nodes/${nodeId}/revoke`, headers: admin.headers, payload: { reason: 'test over' } });
    const code2 = await Promise.race([run.exited, new Promise((r) => setTimeout(() => r('timeout'), 20_000))]);
    expect(code2, run.output()).not.toBe('timeout');
    expect(run.output()).toMatch(/revoked/i);
    expect(existsSync(file)).toBe(true);
  });
});
