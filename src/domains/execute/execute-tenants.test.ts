import { readdirSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createIsolation } from '../../platform/isolation/index.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { detectInstalled } from './service.js';
import { findLanguage } from './languages.js';
import { describeNeeding, isolationNeed, itNeeding, toolchainNeed } from '../../../test/needs.js';

/**
 * What one organization can do to the others through `POST /v1/execute` (issue #10): a program that breaks
 * its compile step fails only its own execution, a burst from one organization queues behind its own work,
 * and a run sees nothing of the host beyond the toolchains.
 */

const isolation = await createIsolation();
const installed = await detectInstalled();

describeNeeding(isolationNeed(isolation), 'execute: one organization cannot hurt the others', () => {
  let h: Harness;
  let a: Actor;
  let b: Actor;
  beforeAll(async () => {
    // A small pool, as on a 2-core host: two executions at once, the default queue (4 x 2).
    h = await createHarness({ HANGAR_EXECUTE_CONCURRENCY: '2' });
    a = await createOrgAdmin(h);
    b = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  const post = (actor: Actor, payload: Record<string, unknown>) =>
    h.app.inject({ method: 'POST', url: '/v1/execute', headers: actor.headers, payload });
  const execute = async (actor: Actor, payload: Record<string, unknown>) => {
    const res = await post(actor, payload);
    expect(res.statusCode, res.body).toBe(200);
    return json(res);
  };

  itNeeding(
    toolchainNeed('typescript', installed.get(findLanguage('typescript')!)),
    'deeply nested TypeScript fails its own compile step; TypeScript keeps working for everyone',
    async () => {
      const ok = 'const n: number = 21;\nconsole.log(n * 2);';
      // Control: TypeScript works before the attack.
      expect((await execute(a, { language: 'ts', code: ok })).run).toMatchObject({ stdout: '42\n', code: 0 });

      const attack = await execute(a, { language: 'ts', code: `let x = ${'('.repeat(400_000)}1${')'.repeat(400_000)}` });
      expect(attack.compile.status === 'exited' && attack.compile.code === 0).toBe(false);
      expect(`${attack.compile.stderr}${attack.compile.message ?? ''}`).toMatch(/stack overflow|memory limit|Maximum call stack|error/i);
      expect(attack.run).toMatchObject({ status: 'skipped', code: null });

      // The same organization and another one still compile and run TypeScript.
      expect((await execute(a, { language: 'ts', code: ok })).run).toMatchObject({ stdout: '42\n', code: 0 });
      const other = await execute(b, { language: 'typescript', code: ok });
      expect(other.compile).toMatchObject({ status: 'exited', code: 0 });
      expect(other.run).toMatchObject({ stdout: '42\n', code: 0 });
    },
    60_000,
  );

  it('a burst of one organization queues behind its own work; another organization’s request runs at once', async () => {
    const started = Date.now();
    const sleeper = { language: 'python', code: 'import time\ntime.sleep(4)\nprint("a")', run_timeout: 10_000 };
    const burst = Array.from({ length: 12 }, () => post(a, sleeper).then((res) => ({ res, at: Date.now() - started })));
    // Let every request of the burst be admitted or refused before the other organization asks.
    await new Promise((r) => setTimeout(r, 1000));
    const other = await post(b, { language: 'python', code: 'print("b")' });
    const otherAt = Date.now() - started;
    expect(other.statusCode, other.body).toBe(200);
    expect(json(other).run).toMatchObject({ stdout: 'b\n', code: 0 });

    const results = await Promise.all(burst);
    const done = results.filter((r) => r.res.statusCode === 200);
    const refused = results.filter((r) => r.res.statusCode === 429);
    expect(done.length + refused.length).toBe(12);
    // The organization over its own queue limit is told to come back, as before.
    expect(refused.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.res.headers['retry-after']).toBe('1');
      expect(json(r.res).error.code).toBe('rate_limited');
    }
    for (const r of done) expect(json(r.res).run).toMatchObject({ stdout: 'a\n', code: 0 });
    // B finished while most of A's burst was still waiting its turn.
    const last = Math.max(...done.map((r) => r.at));
    expect(otherAt).toBeLessThan(last - 4000);
  }, 120_000);

  it('a run sees an empty /usr/local, not the host’s', async () => {
    // Control: the host's /usr/local has entries (this check means something only where it does).
    const host = readdirSync('/usr/local');
    const body = await execute(a, {
      language: 'python',
      code: 'import os\nfor d in ("/usr/local", "/usr/local/bin", "/usr/local/lib", "/usr/local/etc"):\n    print(d, sorted(os.listdir(d)) if os.path.isdir(d) else None)',
    });
    const lines = body.run.stdout.trim().split('\n');
    expect(lines[0]).toBe('/usr/local []');
    expect(lines.slice(1)).toEqual(['/usr/local/bin None', '/usr/local/lib None', '/usr/local/etc None']);
    expect(host.length).toBeGreaterThan(0);
    // Writing there fails too (read-only).
    const write = await execute(a, {
      language: 'python',
      code: 'try:\n    open("/usr/local/x", "w")\n    print("wrote")\nexcept OSError as e:\n    print("refused")',
    });
    expect(write.run.stdout).toBe('refused\n');
  });

  it('/proc/self/mountinfo names no host path: a bound host path appears at its own path, everything else is a fresh file system', async () => {
    const body = await execute(a, { language: 'bash', code: 'cat /proc/self/mountinfo' });
    const lines: string[] = body.run.stdout.trim().split('\n');
    expect(lines.length).toBeGreaterThan(5);
    const revealing = lines.filter((line) => {
      // id parent dev root mountpoint options [optional...] - fstype source superoptions
      const [before, after] = line.split(' - ');
      const [, , , root, at] = before!.split(' ');
      const fstype = after!.split(' ')[0];
      if (fstype === 'tmpfs') return root !== '/' && !(root === '/newroot' && at === '/'); // bwrap's own root
      if (fstype === 'devtmpfs') return root !== `/${at!.split('/').pop()}`; // /dev/null is devtmpfs's /null
      if (fstype === 'proc' || fstype === 'devpts') return root !== '/';
      return root !== at; // a bind of the host's disk: only where the same path is seen inside
    });
    expect(revealing).toEqual([]);
    expect(body.run.stdout).not.toContain(h.dataDir);
    expect(body.run.stdout).not.toContain('/var/lib/hangar');
  });
});
