import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../app.js';
import { createIsolation } from '../../platform/isolation/index.js';
import type { Isolation } from '../../platform/isolation/types.js';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { describeNeeding, isolationNeed } from '../../../test/needs.js';
import { until } from '../../../test/helpers.js';
import { hostHierarchy } from '../../../test/cgroups.js';

/**
 * One-shot execution uses no sandbox network: these harnesses make no network namespaces ahead, so tearing them
 * down does not queue behind the kernel's namespace clean-up (slow in the cgroup v2 test guest after the sandbox suites).
 */
const NO_SPARE_NETWORKS = { HANGAR_SANDBOX_SPARE_NETWORKS: '0' };

/**
 * What a hostile or careless program can do, through the HTTP API in a real sandbox: limits end it with
 * the status saying which, it sees no network and nothing outside its work dir, executions share nothing,
 * and a client that goes away takes its execution with it.
 */

const isolation = await createIsolation();

/** Host processes whose command line contains `marker` (a unique file name given to the program). */
function processesWith(marker: string): number[] {
  const found: number[] = [];
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(marker)) found.push(Number(pid));
    } catch {
      // gone already
    }
  }
  return found;
}

const unique = () => randomBytes(6).toString('hex');

describeNeeding(isolationNeed(isolation), 'execute: isolation and limits', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness({ ...NO_SPARE_NETWORKS, HANGAR_EXECUTE_OUTPUT_LIMIT_BYTES: '10000', HANGAR_EXECUTE_QUEUE: '16' });
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  const execute = async (payload: Record<string, unknown>, actor: Actor = admin) => {
    const res = await h.app.inject({ method: 'POST', url: '/v1/execute', headers: actor.headers, payload });
    expect(res.statusCode, res.body).toBe(200);
    return { ...json(res), id: res.headers['x-execution-id'] as string };
  };
  const py = (code: string, extra: Record<string, unknown> = {}) => execute({ language: 'python', code, ...extra });

  it('GET /v1/runtimes says which cgroup hierarchy limits the runs: the one the host boots with', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/v1/runtimes', headers: admin.headers });
    expect(res.statusCode).toBe(200);
    expect(json(res).meta.isolation).toEqual({ available: true, reason: null, cgroup: hostHierarchy });
  });

  it('a busy loop is killed at run_timeout', async () => {
    const t0 = Date.now();
    const body = await py('while True: pass', { run_timeout: 1000 });
    expect(body.run).toMatchObject({ status: 'timeout', code: null, signal: 'SIGKILL', message: expect.any(String) });
    expect(body.run.time_ms).toBeGreaterThanOrEqual(900);
    expect(Date.now() - t0).toBeLessThan(5000);
  });

  it('a sleeping program is killed at run_timeout too (wall clock, not CPU)', async () => {
    // 3 s, not less: Python must start and print within it on a slow host too (the cgroup v2 guest, ADR 0021).
    const body = await py('import time\nprint("start", flush=True)\ntime.sleep(30)', { run_timeout: 3000 });
    expect(body.run).toMatchObject({ status: 'timeout', stdout: 'start\n', signal: 'SIGKILL' });
    expect(body.run.time_ms).toBeLessThan(8000);
  });

  it('a memory hog is killed at the memory limit', async () => {
    const body = await py('chunks = []\nwhile True:\n    chunks.append(bytearray(8 * 1024 * 1024))', { run_memory_limit: 64 * 1024 * 1024 });
    expect(body.run.status).toBe('memory_limit');
    expect(body.run.code).toBeNull();
    expect(body.run.message).toMatch(/memory/i);
    expect(body.run.memory_kb).toBeGreaterThan(32 * 1024);
    expect(body.run.memory_kb).toBeLessThan(2 * 64 * 1024);
  });

  it('a fork bomb ends at its limits, leaves no process behind, and the next execution runs', async () => {
    const name = `bomb-${unique()}.sh`;
    const t0 = Date.now();
    const body = await execute({ language: 'bash', files: [{ name, content: 'bomb() { bomb | bomb & }; bomb; sleep 5' }], run_timeout: 2000 });
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(['timeout', 'memory_limit', 'exited', 'signaled']).toContain(body.run.status);
    expect(processesWith(name)).toEqual([]);
    const after = await py('print("still fine")');
    expect(after.run).toMatchObject({ stdout: 'still fine\n', code: 0 });
  });

  it('has no network: only a loopback of its own, and the host’s listening port is unreachable', async () => {
    let connections = 0;
    const server = net.createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as net.AddressInfo).port;
    try {
      const body = await py(
        [
          'import os, socket',
          'print(sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else ["lo"])',
          'for host in ("127.0.0.1", "10.0.2.2"):',
          '    s = socket.socket(); s.settimeout(1)',
          '    try:',
          `        s.connect((host, ${port})); print("connected", host)`,
          '    except OSError as e:',
          '        print("refused", host)',
        ].join('\n'),
      );
      expect(body.run.stdout).toBe("['lo']\nrefused 127.0.0.1\nrefused 10.0.2.2\n");
      expect(connections).toBe(0);
    } finally {
      server.close();
    }
  });

  it('cannot write outside its work dir, and what it writes elsewhere never reaches the host', async () => {
    const marker = `hangar-escape-${unique()}`;
    const body = await py(
      [
        'import os',
        `targets = ["/etc/${marker}", "/usr/${marker}", "/${marker}", "/root/${marker}", "/work/${marker}", "${tmpdir()}/${marker}", "../${marker}"]`,
        'for t in targets:',
        '    try:',
        '        open(t, "w").write("x"); print("wrote", t)',
        '    except OSError as e:',
        '        print("refused", t)',
        'open("inside.txt", "w").write("ok"); print("wrote inside", os.getcwd())',
      ].join('\n'),
    );
    const lines = body.run.stdout.trim().split('\n');
    expect(lines.at(-1)).toBe('wrote inside /box');
    for (const line of lines.slice(0, -1)) {
      // A private /tmp inside the sandbox may take the write; the host must never see it.
      if (line.startsWith('wrote')) expect(line).toMatch(new RegExp(`wrote (${tmpdir()}|\\.\\.)/`));
    }
    for (const dir of ['/etc', '/usr', '/', '/root', '/work', tmpdir()]) expect(existsSync(path.join(dir, marker))).toBe(false);
  });

  it('a file left by one run is absent in the next', async () => {
    const first = await py(
      'open("left.txt", "w").write("x")\nopen("/tmp/left.txt", "w").write("x") if __import__("os").access("/tmp", 2) else None\nprint(sorted(__import__("os").listdir(".")))',
    );
    expect(first.run.stdout).toContain("'left.txt'");
    const second = await py('import os\nprint(os.path.exists("left.txt"), os.path.exists("/tmp/left.txt"), sorted(os.listdir(".")))');
    expect(second.run.stdout).toBe("False False ['main.py']\n");
  });

  it('runaway output is cut at the output limit and says so', async () => {
    const body = await py('import sys\nwhile True:\n    sys.stdout.write("x" * 1000)\n    sys.stderr.write("e" * 100)', { run_timeout: 1500 });
    expect(body.run.stdout.length).toBe(10_000);
    expect(body.run.stderr.length).toBe(10_000);
    expect(body.run).toMatchObject({ stdout_truncated: true, stderr_truncated: true });
    expect(body.run.message).toContain('stdout was cut at 10000 bytes');
    expect(body.run.message).toContain('stderr was cut at 10000 bytes');
  });

  it('output under the limit is not marked truncated', async () => {
    const body = await py('print("x" * 9000)');
    expect(body.run).toMatchObject({ stdout_truncated: false, stderr_truncated: false, message: null });
  });

  it('8 parallel executions are isolated from each other', async () => {
    const program = (n: number) =>
      ['import os, time', `open("mine.txt", "w").write("${n}")`, 'time.sleep(0.3)', 'print(open("mine.txt").read(), sorted(os.listdir(".")))'].join(
        '\n',
      );
    const results = await Promise.all(Array.from({ length: 8 }, (_, n) => py(program(n))));
    for (const [n, r] of results.entries()) expect(r.run).toMatchObject({ stdout: `${n} ['main.py', 'mine.txt']\n`, code: 0 });
    expect(new Set(results.map((r) => r.id)).size).toBe(8);
  });

  it('a program that sends itself SIGSEGV is reported as signaled', async () => {
    const body = await py('import os, signal\nprint("before", flush=True)\nos.kill(os.getpid(), signal.SIGSEGV)');
    expect(body.run).toMatchObject({ status: 'signaled', signal: 'SIGSEGV', code: null, stdout: 'before\n' });
  });

  it('a C program that dereferences NULL is reported as SIGSEGV', async () => {
    const body = await execute({ language: 'c', code: '#include <signal.h>\nint main(void) { raise(SIGSEGV); return 0; }' });
    expect(body.run).toMatchObject({ status: 'signaled', signal: 'SIGSEGV', code: null });
  });

  it('records started then completed, found by code_execution_id', async () => {
    const ok = await py('print(1)');
    const res = await h.app.inject({ method: 'GET', url: `/v1/activity?code_execution_id=${ok.id}`, headers: admin.headers });
    const events = json(res).data.events;
    expect(events.map((e: { eventType: string }) => e.eventType)).toEqual(['code_execution.completed', 'code_execution.started']);
    expect(events[0]).toMatchObject({
      resourceType: 'code_execution',
      resourceId: ok.id,
      codeExecutionId: ok.id,
      status: 'completed',
      severity: 'info',
      actorUserId: admin.userId,
      metadata: { language: 'python', version: ok.version, outcome: 'exited', exitCode: 0 },
    });
    expect(events[1]).toMatchObject({ status: 'started', summary: `python ${ok.version}` });
  });

  it('records failed for a non-zero exit, a timeout and a compile error', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ language: 'python', code: 'raise SystemExit(4)' }, 'exited'],
      [{ language: 'python', code: 'while True: pass', run_timeout: 300 }, 'timeout'],
      [{ language: 'c', code: 'int main(void) { return nope; }' }, 'compile_failed'],
    ];
    for (const [payload, outcome] of cases) {
      const r = await execute(payload);
      const events = json(await h.app.inject({ method: 'GET', url: `/v1/activity?code_execution_id=${r.id}`, headers: admin.headers })).data.events;
      expect(events[0]).toMatchObject({ eventType: 'code_execution.failed', status: 'failed', severity: 'warning', metadata: { outcome } });
    }
  });

  it('a member may execute, and sees their executions’ events', async () => {
    const member = await addOrgMember(h, admin, 'member');
    const r = await execute({ language: 'bash', code: 'echo member' }, member);
    expect(r.run.stdout).toBe('member\n');
    const events = json(await h.app.inject({ method: 'GET', url: `/v1/activity?code_execution_id=${r.id}`, headers: member.headers })).data.events;
    expect(events).toHaveLength(2);
    // A key limited to execute:run may run code but not read activity.
    const key = await keyFor(h, member, ['execute:run']);
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/execute',
      headers: { 'x-api-key': key },
      payload: { language: 'bash', code: 'echo k' },
    });
    expect(res.statusCode).toBe(200);
  });
});

describeNeeding(isolationNeed(isolation), 'execute: load', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness({ ...NO_SPARE_NETWORKS, HANGAR_EXECUTE_CONCURRENCY: '1', HANGAR_EXECUTE_QUEUE: '1' });
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  it('beyond the running slot and the queue, 429 with Retry-After; the admitted ones finish', async () => {
    const slow = () =>
      h.app.inject({ method: 'POST', url: '/v1/execute', headers: admin.headers, payload: { language: 'bash', code: 'sleep 1; echo done' } });
    const first = slow();
    const second = slow();
    await until('both admitted', async () => {
      const events = json(await h.app.inject({ method: 'GET', url: '/v1/activity?event_type=code_execution.started', headers: admin.headers })).data
        .events;
      return events.length >= 2;
    });
    const t0 = Date.now();
    const third = await slow();
    expect(Date.now() - t0).toBeLessThan(500);
    expect(third.statusCode).toBe(429);
    expect(third.headers['retry-after']).toBe('1');
    expect(json(third).error).toMatchObject({ code: 'rate_limited', message: expect.stringContaining('at capacity (1 running, 1 waiting)') });
    for (const res of await Promise.all([first, second])) {
      expect(res.statusCode).toBe(200);
      expect(json(res).run.stdout).toBe('done\n');
    }
    const after = await slow();
    expect(after.statusCode).toBe(200);
  });
});

describeNeeding(isolationNeed(isolation), 'execute: a client that disconnects', () => {
  let h: Harness;
  let admin: Actor;
  let port: number;
  beforeAll(async () => {
    h = await createHarness(NO_SPARE_NETWORKS);
    admin = await createOrgAdmin(h);
    await h.app.listen({ host: '127.0.0.1', port: 0 });
    port = (h.app.server.address() as net.AddressInfo).port;
  });
  afterAll(() => h?.close());

  it('cancels its execution: the sandbox is killed at once and the activity says cancelled', async () => {
    const name = `sleeper_${unique()}.py`;
    const payload = JSON.stringify({ language: 'python', files: [{ name, content: 'import time\ntime.sleep(25)' }], run_timeout: 30_000 });
    const socket = net.connect(port, '127.0.0.1');
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.write(
      `POST /v1/execute HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: ${admin.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
    );
    await until('the program to start', () => processesWith(name).length > 0);
    const t0 = Date.now();
    socket.destroy();
    const failed = await until('the failed event', async () => {
      const events = json(await h.app.inject({ method: 'GET', url: '/v1/activity?event_type=code_execution.failed', headers: admin.headers })).data
        .events;
      return events.find((e: { metadata?: { outcome?: string } }) => e.metadata?.outcome === 'cancelled');
    });
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(failed).toMatchObject({ status: 'failed', severity: 'warning', summary: expect.stringContaining('cancelled') });
    await until('no process left', () => processesWith(name).length === 0, 3000);
  });
});

describe('execute: a host without working isolation', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness(NO_SPARE_NETWORKS);
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h.close());

  async function appWith(iso: Isolation) {
    return buildApp({ ...h.deps, isolation: iso });
  }

  it('answers 503 naming the reason, after validating the request', async () => {
    const app = await appWith({
      available: false,
      unavailableReason: 'bwrap is not installed',
      cgroup: null,
      createWorkDir: () => Promise.reject(new Error('must not be called')),
      run: () => Promise.reject(new Error('must not be called')),
      installTool: () => Promise.reject(new Error('must not be called')),
    });
    try {
      const res = await app.inject({ method: 'POST', url: '/v1/execute', headers: admin.headers, payload: { language: 'bash', code: 'echo hi' } });
      expect(res.statusCode).toBe(503);
      expect(json(res).error).toMatchObject({ code: 'service_unavailable', message: expect.stringContaining('bwrap is not installed') });
      const bad = await app.inject({ method: 'POST', url: '/v1/execute', headers: admin.headers, payload: { language: 'bash' } });
      expect(bad.statusCode).toBe(400);
      // What is installed is still listed.
      const runtimes = await app.inject({ method: 'GET', url: '/v1/runtimes', headers: admin.headers });
      expect(json(runtimes).data.some((r: { language: string }) => r.language === 'bash')).toBe(true);
      expect(json(runtimes).meta.isolation).toEqual({ available: false, reason: 'bwrap is not installed', cgroup: null });
    } finally {
      await app.close();
    }
  });

  it('a sandbox that fails to start is a 503 with the execution id, recorded as failed', async () => {
    const disposed: string[] = [];
    const app = await appWith({
      available: true,
      unavailableReason: null,
      cgroup: null,
      createWorkDir: async () => {
        const { mkdtemp } = await import('node:fs/promises');
        const dir = await mkdtemp(path.join(tmpdir(), 'hangar-fake-box-'));
        return { path: dir, dispose: async () => void disposed.push(dir) };
      },
      installTool: async (name) => `/.hangar/${name}`,
      run: async () => ({
        stdout: '',
        stderr: '',
        code: null,
        signal: null,
        status: 'error',
        message: 'cannot create the cgroup',
        stdoutTruncated: false,
        stderrTruncated: false,
        wallMs: 0,
        cpuMs: 0,
        memoryKb: 0,
      }),
    });
    try {
      const res = await app.inject({ method: 'POST', url: '/v1/execute', headers: admin.headers, payload: { language: 'bash', code: 'echo hi' } });
      expect(res.statusCode).toBe(503);
      expect(json(res).error.message).toContain('cannot create the cgroup');
      const id = res.headers['x-execution-id'] as string;
      expect(id).toMatch(/^cex_/);
      expect(disposed).toHaveLength(1);
      const events = json(await app.inject({ method: 'GET', url: `/v1/activity?code_execution_id=${id}`, headers: admin.headers })).data.events;
      expect(events[0]).toMatchObject({ eventType: 'code_execution.failed', severity: 'error', metadata: { outcome: 'sandbox_error' } });
    } finally {
      await app.close();
    }
  });
});
