import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type WebSocket, WebSocketServer } from 'ws';
import { until } from '../../test/helpers.js';
import { link, status, unlink } from './cli.js';
import { readConfig } from './config.js';
import type { DeviceRun } from './loop.js';
import { RevokedError, runDevice } from './runner.js';

/** A loopback stand-in for the server's device routes and dispatch socket. */
async function fakeServer() {
  const state = {
    polls: [] as Array<Record<string, unknown>>,
    pollAnswers: [] as Array<Record<string, unknown>>,
    linkStart: null as Record<string, unknown> | null,
    revoked: false,
    events: [] as Array<{ frame: { type: string; runId: string; sequenceNumber: number; payload?: Record<string, unknown> } }>,
    received: [] as Array<Record<string, unknown>>,
    connections: 0,
    sockets: [] as WebSocket[],
    modelCalls: 0,
  };
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const json = body ? JSON.parse(body) : {};
      const send = (status: number, data: unknown) =>
        res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(JSON.stringify(data));
      const authed = req.headers.authorization === 'Bearer hgd_token';
      if (req.url === '/v1/runmesh/devices/link/start') {
        state.linkStart = json;
        return send(201, { data: { code: 'ABCD-EFGH', url: 'http://x/device?code=ABCD-EFGH', expiresAt: 'soon', pollSecret: 'ps', interval: 0.05 } });
      }
      if (req.url === '/v1/runmesh/devices/link/poll') {
        state.polls.push({ ...json, at: Date.now() });
        return send(200, { data: state.pollAnswers.shift() ?? { status: 'expired' } });
      }
      if (!authed || state.revoked) return send(401, { error: { code: 'unauthorized', message: 'bad token', requestId: 'r' } });
      if (req.url === '/v1/runmesh/device')
        return send(200, {
          data: {
            id: 'node_1',
            name: 'box',
            status: 'active',
            online: true,
            meshAddress: '100.64.0.9',
            os: 'Linux',
            appVersion: '0.1.0',
            lastSeenAt: null,
            ownerUserId: 'usr_1',
            organizationId: 'org_1',
          },
        });
      if (req.url === '/v1/runmesh/device/unlink') {
        state.revoked = true;
        return send(200, { data: { revoked: true } });
      }
      if (req.url?.endsWith('/model')) {
        state.modelCalls++;
        res.writeHead(200, { 'content-type': 'application/x-ndjson' });
        return void res.end(`${JSON.stringify({ type: 'text-delta', text: 'ok' })}\n${JSON.stringify({ type: 'finish', usage: {} })}\n`);
      }
      if (req.url === '/v1/thread-events') {
        state.events.push(json);
        return json.frame.payload
          ? send(200, { data: { accepted: true, duplicate: false, sequence: state.events.length } })
          : res.writeHead(202).end();
      }
      send(404, { error: { code: 'not_found', message: req.url } });
    });
  });
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    if (req.headers.authorization !== 'Bearer hgd_token') {
      socket.end('HTTP/1.1 401 Unauthorized\r\n\r\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      state.connections++;
      state.sockets.push(ws);
      ws.on('message', (d) => state.received.push(JSON.parse(String(d))));
      ws.send(JSON.stringify({ type: 'hello', nodeId: 'node_1', heartbeatSeconds: 1 }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const close = async () => {
    for (const s of state.sockets) s.terminate();
    wss.close();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  };
  return { url, state, close };
}

const aRun = (runId: string): DeviceRun => ({
  runId,
  threadId: 'thr_1',
  rolloutId: 'rol_1',
  agent: { slug: 'a', instructions: null, tools: ['exec_command'], config: {} },
  messages: [{ role: 'user', content: 'hi' }],
});

describe('device link, status, unlink and run', () => {
  let dir: string;
  let env: NodeJS.ProcessEnv;
  let srv: Awaited<ReturnType<typeof fakeServer>>;
  let out: string[];
  const io = (signal = new AbortController().signal) => ({ env, out: (l: string) => void out.push(l), err: (l: string) => void out.push(l), signal });
  beforeEach(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'hangar-devcli-'));
    env = { HANGAR_DEVICE_CONFIG_DIR: path.join(dir, 'cfg') };
    srv = await fakeServer();
    out = [];
  });
  afterEach(async () => {
    await srv.close();
    await fs.rm(dir, { recursive: true, force: true });
  });

  it('links (honouring pending and slow_down), saves the config, refuses to link twice, shows status, unlinks', async () => {
    srv.state.pollAnswers.push(
      { status: 'pending', interval: 0.05 },
      { status: 'slow_down', interval: 0.3 },
      { status: 'approved', nodeId: 'node_1', deviceToken: 'hgd_token', meshAddress: '100.64.0.9', organizationId: 'org_1' },
    );
    const config = await link(io(), { url: srv.url, label: 'box' });
    expect(out[0]).toBe('Open http://x/device?code=ABCD-EFGH and approve code ABCD-EFGH');
    expect(srv.state.linkStart).toMatchObject({ publicKey: config.publicKey, deviceLabel: 'box', appVersion: expect.any(String) });
    expect(srv.state.linkStart).not.toHaveProperty('privateKey');
    expect(srv.state.polls.map((p) => p.pollSecret)).toEqual(['ps', 'ps', 'ps']);
    expect((srv.state.polls[2]!.at as number) - (srv.state.polls[1]!.at as number)).toBeGreaterThanOrEqual(280); // waited the slow_down interval
    expect(await readConfig(env)).toMatchObject({
      url: srv.url,
      nodeId: 'node_1',
      deviceToken: 'hgd_token',
      meshAddress: '100.64.0.9',
      label: 'box',
    });
    expect(out.join('\n')).toContain('node_1');

    await expect(link(io(), { url: srv.url })).rejects.toThrow(/already linked/);

    out = [];
    await status(io(), {});
    expect(out.join('\n')).toMatch(/Mesh address\s+100\.64\.0\.9/);

    await unlink(io(), {});
    expect(srv.state.revoked).toBe(true);
    expect(await readConfig(env)).toBeNull();
  });

  it('reports an expired code and saves nothing', async () => {
    await expect(link(io(), { url: srv.url })).rejects.toThrow(/expired/);
    expect(await readConfig(env)).toBeNull();
  });

  it('takes a run once however often it is sent, heartbeats, reconnects after a drop, and stops after the first run with once', async () => {
    const ws = await fs.mkdtemp(path.join(dir, 'ws-'));
    const lines: string[] = [];
    const ac = new AbortController();
    const done = runDevice({
      config: { url: srv.url, deviceToken: 'hgd_token' },
      workspace: ws,
      endpoints: ['192.0.2.1:51820'],
      signal: ac.signal,
      log: (l) => void lines.push(l),
      backoffMs: { min: 20, max: 100 },
    });
    await until('a heartbeat', () => srv.state.received.find((m) => m.type === 'heartbeat'));
    expect(srv.state.received[0]).toEqual({ type: 'heartbeat', endpoints: ['192.0.2.1:51820'] });
    // A drop: the device comes back.
    srv.state.sockets[0]!.terminate();
    await until('a reconnect', () => srv.state.connections === 2);
    const sock = srv.state.sockets[1]!;
    sock.send(JSON.stringify({ type: 'run', run: aRun('run_1') }));
    sock.send(JSON.stringify({ type: 'run', run: aRun('run_1') }));
    await until('run_completed', () => srv.state.events.find((e) => e.frame.type === 'run_completed'));
    sock.send(JSON.stringify({ type: 'run', run: aRun('run_1') })); // re-sent after it finished: ignored
    // A run the server thinks this device holds (resume) that this process never had: refused, never started.
    sock.send(JSON.stringify({ type: 'run', run: { ...aRun('run_lost'), resume: true } }));
    await until('the lost run refused', () => srv.state.received.find((m) => m.type === 'reject' && m.runId === 'run_lost'));
    await new Promise((r) => setTimeout(r, 200));
    expect(srv.state.modelCalls).toBe(1);
    // Accepted (an accept is repeated only while the run is still going: a lost accept is harmless to repeat).
    const accepts = srv.state.received.filter((m) => m.type === 'accept');
    expect(accepts.length).toBeGreaterThanOrEqual(1);
    expect(new Set(accepts.map((a) => a.runId))).toEqual(new Set(['run_1']));
    expect(lines.some((l) => /run run_1 completed/.test(l))).toBe(true);
    ac.abort();
    await done;
  });

  it('stops on close code 4401 and says why, and --once ends after the first run', async () => {
    const ws = await fs.mkdtemp(path.join(dir, 'ws-'));
    const once = runDevice({
      config: { url: srv.url, deviceToken: 'hgd_token' },
      workspace: ws,
      endpoints: [],
      once: true,
      signal: new AbortController().signal,
      log: () => {},
    });
    await until('a connection', () => srv.state.sockets[0]);
    srv.state.sockets[0]!.send(JSON.stringify({ type: 'run', run: aRun('run_2') }));
    await once;
    expect(srv.state.events.at(-1)!.frame.type).toBe('run_completed');

    const revoked = runDevice({
      config: { url: srv.url, deviceToken: 'hgd_token' },
      workspace: ws,
      endpoints: [],
      signal: new AbortController().signal,
      log: () => {},
    });
    await until('a second connection', () => srv.state.sockets[1]);
    srv.state.sockets[1]!.close(4401, 'revoked');
    await expect(revoked).rejects.toBeInstanceOf(RevokedError);

    const refused = runDevice({
      config: { url: srv.url, deviceToken: 'hgd_wrong' },
      workspace: ws,
      endpoints: [],
      signal: new AbortController().signal,
      log: () => {},
    });
    await expect(refused).rejects.toBeInstanceOf(RevokedError);
  });
});
