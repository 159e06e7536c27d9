import { spawn } from 'node:child_process';
import path from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { until } from '../../../test/helpers.js';
import { CSI, openError, ShellClient } from '../../../test/shell-client.js';
import { SHELL_LIMITS_STATE } from './shell.js';

// `GET /v1/sandboxes/{id}/shell` (ADR 0046) against a real sandbox (runc), over a real WebSocket, and the CLI's
// `hangar sandbox shell` driving it with piped stdin.

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

let h: Harness;
let base: string;
let admin: Actor;
let sandboxId: string;
/** What the app logs, at debug (request logs included): no credential given in a query may appear in it. */
const logLines: string[] = [];

beforeAll(async () => {
  const sink = new Writable({
    write(chunk, _enc, cb) {
      logLines.push(String(chunk));
      cb();
    },
  });
  h = await createHarness({ LOG_LEVEL: 'debug' }, { log: pino({ level: 'debug' }, sink) });
  base = await h.app.listen({ host: '127.0.0.1', port: 0 });
  admin = await createOrgAdmin(h);
  const res = await h.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: admin.headers, payload: { network: false } });
  expect(res.statusCode, res.body).toBe(201);
  sandboxId = json(res).data.id;
}, 120_000);
afterAll(() => h?.close());

describe('the shell WebSocket', () => {
  it('runs an interactive shell on a terminal: output, resize, exit code', async () => {
    const shell = await ShellClient.open(base, sandboxId, admin.headers, '?cols=100&rows=30');
    shell.type('echo $((6*7)); tty; stty size; id -un; pwd\n');
    // Input is echoed by the terminal; "42" only appears as output.
    await shell.waitFor(/42\r\n\/dev\/pts\/\d+\r\n30 100\r\nuser\r\n\/home\/user\r\n/);
    shell.resize(132, 43);
    // The kernel tells the shell (SIGWINCH); what it runs next sees the new size.
    await until('the resize to apply', async () => {
      shell.type('stty size\n');
      await new Promise((r) => setTimeout(r, 100));
      return /43 132\r\n/.test(shell.text);
    });
    shell.type('exit 3\n');
    const closed = await shell.closed;
    expect(closed.code).toBe(1000);
    expect(shell.frames.at(-1)).toEqual({ type: 'exit', code: 3, signal: null, timedOut: false });
  });

  it('runs a given command, and reports a signal as 128+n', async () => {
    const shell = await ShellClient.open(
      base,
      sandboxId,
      admin.headers,
      `?command=${encodeURIComponent('printf "%s" "$TERM"; [ -t 1 ] && echo " tty"; kill -TERM $$')}&term=vt100`,
    );
    const closed = await shell.closed;
    expect(closed.code).toBe(1000);
    expect(shell.text).toContain('vt100 tty');
    expect(shell.frames.at(-1)).toEqual({ type: 'exit', code: 143, signal: 'SIGTERM', timedOut: false });
  });

  it('answers a bad control frame with an error frame and keeps the session', async () => {
    const shell = await ShellClient.open(base, sandboxId, admin.headers);
    shell.ws.send('{"type":"resize","cols":0,"rows":5}');
    shell.ws.send('not json');
    await until('two error frames', () => shell.frames.filter((f) => f.type === 'error' && f.code === 'invalid_request').length === 2);
    shell.type('echo still-$((1+1))\n');
    await shell.waitFor(/still-2/);
    shell.type('exit\n');
    expect((await shell.closed).code).toBe(1000);
    expect(shell.frames.at(-1)).toMatchObject({ type: 'exit', code: 0 });
  });

  it('kills the shell when the client goes away', async () => {
    const shell = await ShellClient.open(base, sandboxId, admin.headers);
    shell.type('echo pid=$$\n');
    const pid = Number((await shell.waitFor(/pid=(\d+)\r\n/))[1]);
    shell.ws.terminate();
    await until('the shell process to end', async () => {
      const res = await h.app.inject({ method: 'GET', url: `/v1/sandboxes/${sandboxId}/processes/${pid}`, headers: admin.headers });
      expect(res.statusCode, res.body).toBe(200);
      const p = json(res).data;
      return !p.running && p.signal === 'SIGHUP';
    });
  });

  it('ends a session idle past its limit, hanging the shell up', async () => {
    const limits = h.deps.state.get(SHELL_LIMITS_STATE);
    const saved = { ...limits };
    Object.assign(limits, { idleMs: 1500 });
    try {
      const shell = await ShellClient.open(base, sandboxId, admin.headers);
      shell.type('echo pid=$$\n');
      const pid = Number((await shell.waitFor(/pid=(\d+)\r\n/))[1]);
      const closed = await shell.closed;
      expect(closed.code).toBe(4408);
      expect(shell.frames.at(-1)).toMatchObject({ type: 'error', code: 'idle_timeout' });
      await until('the idle shell to end', async () => {
        const p = json(await h.app.inject({ method: 'GET', url: `/v1/sandboxes/${sandboxId}/processes/${pid}`, headers: admin.headers })).data;
        return !p.running && p.signal === 'SIGHUP';
      });
    } finally {
      Object.assign(limits, saved);
    }
  });

  it('refuses bad queries and a plain GET with 400', async () => {
    expect((await openError(base, sandboxId, admin.headers, '?cols=0')).status).toBe(400);
    expect((await openError(base, sandboxId, admin.headers, '?rows=abc')).status).toBe(400);
    expect((await openError(base, sandboxId, admin.headers, `?command=${'x'.repeat(9000)}`)).status).toBe(400);
    const plain = await fetch(`${base}/v1/sandboxes/${sandboxId}/shell`, { headers: admin.headers });
    expect(plain.status).toBe(400);
    expect((await plain.json()).error.code).toBe('invalid_request');
  });
});

describe('who may open a shell', () => {
  it('401 without a credential, 403 without sandbox:write, 404 for another organization or another member', async () => {
    // Control: the owner's key opens it.
    const control = await ShellClient.open(base, sandboxId, admin.headers, '?command=true');
    expect((await control.closed).code).toBe(1000);

    const anonymous = await openError(base, sandboxId, {});
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.error.code).toBe('unauthenticated');

    const readOnly = await keyFor(h, admin, ['sandbox:read']);
    const forbidden = await openError(base, sandboxId, { 'x-api-key': readOnly });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.error.message).toContain('sandbox:write');

    const stranger = await createOrgAdmin(h);
    const other = await openError(base, sandboxId, stranger.headers);
    expect(other.status).toBe(404);
    expect(other.body.error.code).toBe('not_found');
    const member = await addOrgMember(h, admin, 'member');
    expect((await openError(base, sandboxId, member.headers)).status).toBe(404);
    expect((await openError(base, 'sbx_nope', admin.headers)).status).toBe(404);
  });

  it('409 invalid_state for a paused sandbox', async () => {
    const res = await h.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: admin.headers, payload: { network: false } });
    const id = json(res).data.id;
    const paused = await h.app.inject({ method: 'POST', url: `/v1/sandboxes/${id}/pause`, headers: admin.headers });
    expect(paused.statusCode, paused.body).toBe(200);
    const err = await openError(base, id, admin.headers);
    expect(err.status).toBe(409);
    expect(err.body.error.code).toBe('invalid_state');
  }, 60_000);
});

describe('a credential in the query (browsers, whose WebSocket cannot send headers)', () => {
  const q = (params: Record<string, string>) => `?${new URLSearchParams(params)}`;

  it('opens with api_key, or token with org_id, and no headers', async () => {
    const byKey = await ShellClient.open(base, sandboxId, {}, q({ api_key: admin.key, cols: '70', rows: '20' }));
    byKey.type('echo key-$((6*7)); stty size\n');
    await byKey.waitFor(/key-42\r\n20 70\r\n/);
    byKey.type('exit 2\n');
    expect((await byKey.closed).code).toBe(1000);
    expect(byKey.frames.at(-1)).toMatchObject({ type: 'exit', code: 2 });

    const byToken = await ShellClient.open(base, sandboxId, {}, q({ token: admin.token, org_id: admin.orgId, command: 'echo token-$((6*7))' }));
    expect((await byToken.closed).code).toBe(1000);
    expect(byToken.text).toContain('token-42');
  });

  it('refuses another organization’s credential: 404, and a key naming the owner’s organization', async () => {
    // Control: the owner's key in the query opens it (above, and here once more).
    const control = await ShellClient.open(base, sandboxId, {}, q({ api_key: admin.key, command: 'true' }));
    expect((await control.closed).code).toBe(1000);
    const stranger = await createOrgAdmin(h);
    const other = await openError(base, sandboxId, {}, q({ api_key: stranger.key }));
    expect(other.status).toBe(404);
    expect(other.body.error.code).toBe('not_found');
    expect((await openError(base, sandboxId, {}, q({ token: stranger.token }))).status).toBe(404);
    // Claiming the owner's organization does not help: a key belongs to its own; a session needs a membership.
    expect([403, 404]).toContain((await openError(base, sandboxId, {}, q({ api_key: stranger.key, org_id: admin.orgId }))).status);
    expect([403, 404]).toContain((await openError(base, sandboxId, {}, q({ token: stranger.token, org_id: admin.orgId }))).status);
    const member = await addOrgMember(h, admin, 'member');
    expect((await openError(base, sandboxId, {}, q({ api_key: member.key }))).status).toBe(404);
  });

  it('400 for both api_key and token, one given twice, or a query credential beside a header one', async () => {
    const both = await openError(base, sandboxId, {}, q({ api_key: admin.key, token: admin.token }));
    expect(both.status).toBe(400);
    expect(both.body.error.code).toBe('invalid_request');
    expect(both.body.error.message).toMatch(/exactly one of .*api_key.*token/);
    expect((await openError(base, sandboxId, {}, `?api_key=${admin.key}&api_key=${admin.key}`)).status).toBe(400);
    expect((await openError(base, sandboxId, {}, `?token=${admin.token}&token=${admin.token}`)).status).toBe(400);
    const mixed = await openError(base, sandboxId, admin.headers, q({ api_key: admin.key }));
    expect(mixed.status).toBe(400);
    expect(mixed.body.error.message).toContain('not both');
    expect((await openError(base, sandboxId, { authorization: `Bearer ${admin.token}` }, q({ token: admin.token }))).status).toBe(400);
  });

  it('403 for a key without sandbox:write, 401 for a bad or revoked credential', async () => {
    const readOnly = await keyFor(h, admin, ['sandbox:read']);
    const forbidden = await openError(base, sandboxId, {}, q({ api_key: readOnly }));
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.error.message).toContain('sandbox:write');
    const bad: Record<string, string>[] = [
      { api_key: 'hgr_live_notarealkey' },
      { api_key: admin.token },
      { api_key: '' },
      { token: 'not.a.jwt' },
      { token: '' },
    ];
    for (const params of bad) {
      const e = await openError(base, sandboxId, {}, q(params));
      expect(e.status, JSON.stringify(params)).toBe(401);
      expect(e.body.error.code).toBe('unauthenticated');
    }
    // A key revoked while its shell is open ends the session (4401); then the key is refused.
    const created = await h.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: admin.headers,
      payload: { name: 'terminal', scopes: ['sandbox:write'] },
    });
    expect(created.statusCode, created.body).toBe(201);
    const { id, key } = json(created).data;
    const shell = await ShellClient.open(base, sandboxId, {}, q({ api_key: key }));
    shell.type('echo open-$((1+1))\n');
    await shell.waitFor(/open-2\r\n/);
    const revoked = await h.app.inject({ method: 'DELETE', url: `/v1/api-keys/${id}`, headers: admin.headers });
    expect(revoked.statusCode, revoked.body).toBe(200);
    expect((await shell.closed).code).toBe(4401);
    expect((await openError(base, sandboxId, {}, q({ api_key: key }))).status).toBe(401);
  });

  it('never logs a credential given in the query', async () => {
    const key = await keyFor(h, admin, ['sandbox:write']);
    const shell = await ShellClient.open(base, sandboxId, {}, q({ api_key: key, command: 'true' }));
    expect((await shell.closed).code).toBe(1000);
    await openError(base, sandboxId, {}, q({ api_key: key, token: admin.token }));
    await openError(base, sandboxId, {}, q({ token: admin.token, org_id: admin.orgId, cols: '0' }));
    // The request logs were on (debug) and show these requests, with the query's credential redacted.
    const shellLines = logLines.filter((l) => l.includes(`/v1/sandboxes/${sandboxId}/shell`));
    expect(shellLines.some((l) => l.includes('api_key=%28redacted%29'))).toBe(true);
    expect(shellLines.some((l) => l.includes('token=%28redacted%29'))).toBe(true);
    for (const secret of [key, admin.key, admin.token]) expect(logLines.filter((l) => l.includes(secret))).toEqual([]);
  });
});

describe('hangar sandbox shell', () => {
  function cli(args: string[], stdin: string) {
    return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [path.join(ROOT, 'bin/hangar.js'), ...args], {
        env: { ...process.env, HANGAR_BASE_URL: base, HANGAR_API_KEY: admin.key, HANGAR_CONFIG_DIR: h.dataDir },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c) => (stdout += c));
      child.stderr.on('data', (c) => (stderr += c));
      child.on('close', (code) => resolve({ code, stdout, stderr }));
      child.stdin.end(stdin);
    });
  }

  it('runs piped input line by line and exits with the shell’s code', async () => {
    const r = await cli(['sandbox', 'shell', sandboxId], 'echo $((6*7)); tty\nexit 3\n');
    expect(r.stdout.replace(CSI, '')).toMatch(/42\r\n\/dev\/pts\/\d+\r\n/);
    expect(r.stdout).toMatch(/\/dev\/pts\/\d+/);
    expect(r.code, r.stderr).toBe(3);
  }, 30_000);

  it('on a terminal: raw keys (Ctrl-C reaches the sandbox), the window size, the terminal restored', async () => {
    // util-linux `script` gives the CLI a terminal of its own (stdin and stdout), 33x111; its input comes from our pipe.
    // (Node's raw mode keeps ONLCR, so that terminal shows the sandbox's \r\n as \r\r\n.)
    const inner = `stty rows 33 cols 111; node ${path.join(ROOT, 'bin/hangar.js')} sandbox shell ${sandboxId}; echo "cli-exit=$?"; stty -a | grep -o -- '-\\?icanon' | head -1`;
    const child = spawn('script', ['-qfec', inner, '/dev/null'], {
      env: { ...process.env, HANGAR_BASE_URL: base, HANGAR_API_KEY: admin.key, HANGAR_CONFIG_DIR: h.dataDir, TERM: 'xterm' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    const clean = () => out.replace(CSI, '');
    const seen = { detail: () => clean().slice(-400) };
    await until('the sandbox prompt', () => /user@\S+:~\$ $/.test(clean()), { timeoutMs: 20_000, ...seen });
    child.stdin.write('stty size; echo $TERM; sleep 30\r');
    await until('sleep to start', () => /33 111\r*\nxterm\r*\n/.test(clean()), { timeoutMs: 10_000, ...seen });
    child.stdin.write('\x03'); // Ctrl-C: a byte for the sandbox's terminal, which interrupts sleep there
    await until('the prompt after ^C', () => /\^C\r*\n.*user@\S+:~\$ $/s.test(clean()), { timeoutMs: 10_000, ...seen });
    child.stdin.write('exit 4\r');
    const code = await new Promise((resolve) => child.on('close', resolve));
    expect(code).toBe(0);
    expect(clean()).toContain('cli-exit=4');
    // Line mode again after the CLI: stty says icanon, not -icanon.
    expect(clean()).toMatch(/cli-exit=4\r*\nicanon\r*\n/);
  }, 60_000);

  it('ends the shell at the end of piped input without an exit', async () => {
    const r = await cli(['sandbox', 'shell', sandboxId], 'sleep 1; echo after-$((1+1))\nfalse\n');
    expect(r.stdout).toContain('after-2');
    expect(r.code, r.stderr).toBe(1); // bash's status at the end of input: the last command's
  }, 30_000);

  it('--command runs one command', async () => {
    const r = await cli(['sandbox', 'shell', sandboxId, '--command', 'echo hi-$((2+3)); exit 7'], '');
    expect(r.stdout).toContain('hi-5');
    expect(r.code, r.stderr).toBe(7);
  }, 30_000);

  it('says why when the sandbox is not there', async () => {
    const r = await cli(['sandbox', 'shell', 'sbx_nope'], '');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('not found');
  }, 30_000);
});
