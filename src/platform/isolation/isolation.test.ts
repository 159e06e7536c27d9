import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIsolation, type Isolation, type Limits, type RunSpec, type WorkDir } from './index.js';
import { startTimeOf } from './uid-slots.js';
import { interleave } from './bwrap.js';
import { describeNeeding, isolationNeed, itNeeding } from '../../../test/needs.js';
import { until } from '../../../test/helpers.js';
import { hostHierarchy } from '../../../test/cgroups.js';

/**
 * The sandbox as a user of POST /v1/execute would meet it: what a program can and cannot do, how each way
 * of ending is reported, and that nothing (processes, cgroups, files) outlives a run.
 */

const MIB = 1024 * 1024;
const PYTHON = '/usr/bin/python3'; // Debian's: the pyenv one under /root is unreadable by the sandbox user
const canIsolate = process.platform === 'linux' && process.getuid?.() === 0 && existsSync('/usr/bin/bwrap');
const workRoot = mkdtempSync(path.join(tmpdir(), 'hangar-isolation-test-'));
const iso: Isolation = await createIsolation({ workRoot });
const hostNeed = { what: 'a host set up for isolation (Linux, root, /usr/bin/bwrap)', present: canIsolate };

const limits = (over: Partial<Limits> = {}): Limits => ({
  wallMs: 10_000,
  cpuMs: 10_000,
  memoryBytes: 256 * MIB,
  pids: 64,
  fileSizeBytes: 16 * MIB,
  openFiles: 64,
  outputBytes: 64 * 1024,
  ...over,
});

const unique = () => randomBytes(6).toString('hex');

/** Host processes whose command line contains marker. */
function processesWith(marker: string): number[] {
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(marker);
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** Host processes running as uid (real uid), as "pid name state" for a readable failure. */
function processesOf(uid: number): string[] {
  const found: string[] = [];
  for (const p of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const status = readFileSync(`/proc/${p}/status`, 'utf8');
      if (!new RegExp(`^Uid:\\s+${uid}\\s`, 'm').test(status)) continue;
      const field = (name: string) => new RegExp(`^${name}:\\s+(.*)$`, 'm').exec(status)?.[1];
      found.push(`${p} ${field('Name')} ${field('State')} ppid=${field('PPid')}`);
    } catch {
      // gone already
    }
  }
  return found;
}

/** Run cgroups (v1: under <controller>/hangar/, v2: under Hangar's subtree) whose launcher is gone: what a leak would look like. */
function leakedCgroups(): string[] {
  const leaked: string[] = [];
  const cg = iso.cgroup;
  const parents =
    cg?.version === 'v2'
      ? [{ controller: 'unified', dir: path.join(cg.launcherRoot, cg.parent) }]
      : ['memory', 'pids', 'cpu', 'cpuacct', 'freezer'].map((controller) => ({ controller, dir: `/sys/fs/cgroup/${controller}/hangar` }));
  for (const { controller, dir } of parents) {
    if (!existsSync(dir)) continue;
    for (const d of readdirSync(dir, { withFileTypes: true })) {
      const m = d.isDirectory() && /^(\d+)-(\d+)$/.exec(d.name);
      if (m && startTimeOf(Number(m[1])) !== m[2]) leaked.push(`${controller}/hangar/${d.name}`);
    }
  }
  return leaked;
}

/** Compiles C source with the host's gcc into the work dir; the sandbox runs it as /box/<name>. */
function compileC(work: WorkDir, name: string, source: string): string {
  const src = path.join(workRoot, `${name}-${unique()}.c`);
  writeFileSync(src, source);
  execFileSync('gcc', ['-O0', '-o', path.join(work.path, name), src]);
  rmSync(src);
  return `/box/${name}`;
}

describe('interleaved output', () => {
  it('follows the launcher’s runs; what they do not cover follows, stdout first; a character split by a switch stays split', () => {
    const out = Buffer.from('abcdef');
    const err = Buffer.from('XYZ');
    expect(interleave(out, err, { order: [2, -1, 3, -2] })).toBe('abXcdeYZf');
    expect(interleave(out, err, { order: [2, -1] })).toBe('abXcdefYZ');
    expect(interleave(out, err, {})).toBe('abcdefXYZ');
    expect(interleave(Buffer.from('é'), Buffer.from('!'), { order: [1, -1, 1] })).toBe('\ufffd!\ufffd');
  });
});

describe('isolation availability', () => {
  itNeeding(hostNeed, 'is available on a host set up by scripts/setup.sh (root, bwrap, cgroup v1 or v2, native helpers)', () => {
    expect(iso.unavailableReason).toBeNull();
    expect(iso.available).toBe(true);
  });

  itNeeding(hostNeed, 'limits runs through the hierarchy the host boots with: cgroup v2 on a unified host, else v1', () => {
    expect(iso.cgroup?.version).toBe(hostHierarchy);
  });

  itNeeding(
    hostNeed,
    'on cgroup v2, works in a subtree of its own: memory, pids and cpu delegated to it, no process left in a cgroup that has children',
    () => {
      const cg = iso.cgroup!;
      if (cg.version === 'v1') {
        expect(cg.subtree).toBeNull();
        return;
      }
      const subtree = path.join(cg.launcherRoot, cg.parent);
      for (const dir of [cg.launcherRoot, subtree]) {
        expect(readFileSync(path.join(dir, 'cgroup.subtree_control'), 'utf8').split(/\s+/)).toEqual(
          expect.arrayContaining(['memory', 'pids', 'cpu']),
        );
      }
      expect(readFileSync(path.join(subtree, 'cgroup.procs'), 'utf8').trim()).toBe('');
      // Hangar's own cgroup holds no process unless it is the hierarchy's root (which the rule exempts).
      const own = readFileSync('/proc/self/cgroup', 'utf8').match(/^0::(.*)$/m)![1]!;
      if (path.join(cg.mount, own) === cg.launcherRoot) expect(own).toBe('/');
      else expect(own).toBe(cg.serviceLeaf);
    },
  );

  it('says why when it is not, and then refuses to run anything rather than running it unisolated', async () => {
    const none = await createIsolation({ workRoot, bwrapPath: '/nonexistent/bwrap' });
    expect(none.available).toBe(false);
    expect(none.unavailableReason).toMatch(/bwrap|root|Linux/);
    await expect(none.createWorkDir()).rejects.toThrow(/unavailable/);
    await expect(none.run({ argv: ['/bin/true'], workDir: workRoot, limits: limits() })).rejects.toThrow(/unavailable/);
  });

  itNeeding(hostNeed, 'refuses a work root others can write to (and leaves its mode alone)', async () => {
    const shared = await createIsolation({ workRoot: tmpdir() });
    expect(shared.available).toBe(false);
    expect(shared.unavailableReason).toMatch(/writable by root alone/);
    expect(statSync(tmpdir()).mode & 0o777).toBe(0o777);
  });
});

describeNeeding(isolationNeed(iso), 'isolated runs', () => {
  const dirs: WorkDir[] = [];
  let work: WorkDir;
  const fresh = async () => {
    const w = await iso.createWorkDir();
    dirs.push(w);
    return w;
  };
  const run = (argv: string[], over: Partial<RunSpec> & { lim?: Partial<Limits> } = {}) =>
    iso.run({ argv, workDir: over.workDir ?? work.path, stdin: over.stdin, env: over.env, signal: over.signal, limits: limits(over.lim) });

  beforeAll(async () => {
    work = await fresh();
  });
  afterAll(async () => {
    for (const d of dirs) await d.dispose();
    rmSync(workRoot, { recursive: true, force: true });
  });

  it('runs hello world and reports stdout, stderr and the exit code', async () => {
    const r = await run(['/bin/sh', '-c', 'echo hello; echo oops >&2; exit 3']);
    expect(r).toMatchObject({ stdout: 'hello\n', stderr: 'oops\n', code: 3, signal: null, status: 'ok', message: null });
    expect(r.stdoutTruncated).toBe(false);
    expect(r.cpuMs).toBeGreaterThanOrEqual(0);
  });

  it('feeds stdin to the program, also through /dev/stdin, and a large one completely', async () => {
    expect((await run(['/bin/cat'], { stdin: 'line 1\nline 2\n' })).stdout).toBe('line 1\nline 2\n');
    expect((await run(['/bin/sh', '-c', 'cat /dev/stdin > /dev/stdout'], { stdin: 'via /dev\n' })).stdout).toBe('via /dev\n');
    const big = Buffer.alloc(3 * MIB, 'a');
    const r = await run([PYTHON, '-c', 'import sys; print(len(sys.stdin.buffer.read()))'], { stdin: big });
    expect(r.stdout.trim()).toBe(String(big.length));
  });

  it('passes the environment: a fixed PATH/HOME/LANG plus the caller env, nothing from the host', async () => {
    process.env.HANGAR_TEST_SECRET = 'host-only';
    const r = await run(['/bin/sh', '-c', 'echo "$PATH|$HOME|$LANG|$GREETING|${HANGAR_TEST_SECRET:-unset}"'], { env: { GREETING: 'hi' } });
    delete process.env.HANGAR_TEST_SECRET;
    expect(r.stdout.trim()).toBe('/usr/local/bin:/usr/bin:/bin|/tmp|C.UTF-8|hi|unset');
  });

  it('reports an exit 137 the program chose as code 137, not as a kill', async () => {
    expect(await run(['/bin/sh', '-c', 'exit 137'])).toMatchObject({ code: 137, signal: null, status: 'ok', message: null });
  });

  it('reports a program that crashes with SIGSEGV as signaled SIGSEGV', async () => {
    const prog = compileC(work, 'segv', 'int main(void) { volatile int *p = 0; *p = 1; return 0; }\n');
    expect(await run([prog])).toMatchObject({ code: null, signal: 'SIGSEGV', status: 'signaled' });
    expect(await run(['/bin/sh', '-c', 'kill -SEGV $$'])).toMatchObject({ code: null, signal: 'SIGSEGV', status: 'signaled' });
  });

  it('ends a run at the wall-clock limit with SIGKILL, background grandchildren included', async () => {
    const marker = `${1000 + Math.floor(Math.random() * 1000)}.${Date.now() % 1_000_000}`; // a unique sleep length
    const started = Date.now();
    const r = await run(['/bin/sh', '-c', `sleep ${marker} & sleep ${marker}; echo never`], { lim: { wallMs: 1000 } });
    expect(r).toMatchObject({ status: 'timeout', signal: 'SIGKILL', code: null, stdout: '' });
    expect(r.message).toMatch(/wall-clock/);
    expect(Date.now() - started).toBeLessThan(1000 + 8000); // the limit plus generous slack
    expect(processesWith(`sleep\0${marker}`)).toEqual([]);
    expect(processesOf(work.uid!)).toEqual([]);
  });

  it('ends a run at the CPU-time limit of the whole tree', async () => {
    const r = await run(['/bin/sh', '-c', 'while :; do :; done & while :; do :; done'], { lim: { cpuMs: 500, wallMs: 20_000 } });
    expect(r).toMatchObject({ status: 'timeout', signal: 'SIGKILL' });
    expect(r.message).toMatch(/CPU/);
    expect(r.cpuMs).toBeGreaterThanOrEqual(500);
    expect(r.wallMs).toBeLessThan(15_000);
  });

  it('reports a memory hog as oom', async () => {
    const r = await run([PYTHON, '-c', 'b = b"x" * (400 * 1024 * 1024); print("survived")'], { lim: { memoryBytes: 64 * MIB } });
    expect(r.status).toBe('oom');
    expect(r.stdout).toBe('');
    expect(r.message).toMatch(/memory limit/);
  });

  it('reports the peak memory of the program: ~50 MB for a python that holds 50 MB, little for a tiny C program', async () => {
    const py = await run([PYTHON, '-c', 'b = b"x" * (50 * 1000 * 1000); print(len(b))']);
    expect(py.status).toBe('ok');
    expect(py.memoryKb).toBeGreaterThanOrEqual(50_000);
    expect(py.memoryKb).toBeLessThan(200_000);
    const tiny = compileC(work, 'tiny', '#include <stdio.h>\nint main(void) { puts("tiny"); return 0; }\n');
    const c = await run([tiny]);
    expect(c).toMatchObject({ stdout: 'tiny\n', status: 'ok' });
    expect(c.memoryKb).toBeGreaterThan(0);
    expect(c.memoryKb).toBeLessThan(10_000);
  });

  it('caps processes: fork fails at the pids limit, a fork bomb burns out and leaves nothing behind', async () => {
    const counted = await run(
      [
        PYTHON,
        '-c',
        'import os, time\nn = 0\ntry:\n  while n < 1000:\n    if os.fork() == 0:\n      time.sleep(60); os._exit(0)\n    n += 1\nexcept OSError as e:\n  print(n, e.errno)\n',
      ],
      { lim: { pids: 20 } },
    );
    const [n, errno] = counted.stdout.trim().split(' ').map(Number);
    expect(errno).toBe(11); // EAGAIN
    expect(n).toBeLessThan(20);
    expect(counted.status).toBe('ok');

    const bomb = await run(['/bin/sh', '-c', 'f() { f | f & }; f; sleep 30'], { lim: { pids: 32, wallMs: 2000 } });
    expect(['timeout', 'ok', 'signaled']).toContain(bomb.status); // it ends, one way or another
    expect(processesOf(work.uid!)).toEqual([]);
    expect(spawnSync('/bin/true').status).toBe(0); // the host can still start processes
  });

  it('has no network: neither the host loopback nor the outside world is reachable', async () => {
    let connections = 0;
    const server = net.createServer((s) => {
      connections++;
      s.end('hello from the host\n');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as net.AddressInfo).port;
    try {
      const script = `
import socket
for host, port in [("127.0.0.1", ${port}), ("8.8.8.8", 53), ("1.1.1.1", 443)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print(host, "connected")
    except OSError as e:
        print(host, "failed", e.errno)
print("interfaces", sorted(name for _, name in socket.if_nameindex()))
`;
      const r = await run([PYTHON, '-c', script]);
      expect(r.status).toBe('ok');
      expect(r.stdout).not.toMatch(/connected/);
      expect(r.stdout).toMatch(/127\.0\.0\.1 failed 111/); // ECONNREFUSED: its own empty loopback
      expect(r.stdout).toMatch(/8\.8\.8\.8 failed 101/); // ENETUNREACH
      expect(r.stdout).toMatch(/interfaces \['lo'\]/);
      expect(connections).toBe(0);
    } finally {
      server.close();
    }
  });

  it('runs as an unprivileged uid and can write nowhere but /box and its own /tmp', async () => {
    const name = `hangar-escape-${unique()}`;
    const script = [
      'id -u; id -g',
      ...[`/usr/${name}`, `/etc/${name}`, `/${name}`, `/box/${name}`, `/tmp/${name}`].map(
        (p) => `if echo x > ${p} 2>/dev/null; then echo "wrote ${p}"; else echo "denied ${p}"; fi`,
      ),
      'cat /etc/passwd',
      'ls /root 2>&1 | head -1',
    ].join('\n');
    const r = await run(['/bin/sh', '-c', script]);
    const lines = r.stdout.split('\n');
    expect(Number(lines[0])).toBe(work.uid);
    expect(Number(lines[0])).toBeGreaterThanOrEqual(1000);
    expect(Number(lines[1])).toBe(work.gid);
    expect(r.stdout).toContain(`denied /usr/${name}`);
    expect(r.stdout).toContain(`denied /etc/${name}`);
    expect(r.stdout).toContain(`denied /${name}`);
    expect(r.stdout).toContain(`wrote /box/${name}`);
    expect(r.stdout).toContain(`wrote /tmp/${name}`);
    for (const p of [`/usr/${name}`, `/etc/${name}`, `/${name}`, `/tmp/${name}`]) expect(existsSync(p)).toBe(false);
    expect(existsSync(path.join(work.path, name))).toBe(true); // /box is the work dir
    // A generated /etc/passwd naming only the sandbox user, not the host's accounts.
    const passwd = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .filter((l) => l && !/^(root|nobody):/.test(l));
    for (const hostLine of passwd) expect(r.stdout).not.toContain(hostLine);
    expect(r.stdout).toMatch(new RegExp(`^sandbox:x:${work.uid}:`, 'm'));
    expect(r.stdout).toMatch(/No such file or directory/); // /root is not there at all
  });

  it('keeps files only within one work dir: /tmp is fresh every run, a new work dir is empty', async () => {
    const first = await fresh();
    const w1 = await run(['/bin/sh', '-c', 'echo a > /box/kept; echo b > /tmp/scratch; ls /box /tmp'], { workDir: first.path });
    expect(w1.status).toBe('ok');
    // Same work dir (e.g. compile, then run): /box persists, /tmp does not.
    const again = await run(['/bin/sh', '-c', 'ls /box; ls /tmp'], { workDir: first.path });
    expect(again.stdout).toBe('kept\n');
    await first.dispose();
    expect(existsSync(first.path)).toBe(false);
    const second = await fresh();
    const after = await run(['/bin/sh', '-c', 'ls -A /box /tmp'], { workDir: second.path });
    expect(after.stdout).not.toMatch(/kept|scratch/);
  });

  it('limits the size of a file and of the whole work dir', async () => {
    // dd (unlike python, which ignores SIGXFSZ and gets EFBIG) dies of the signal.
    const big = await run(['/bin/dd', 'if=/dev/zero', 'of=/box/big', 'bs=1M', 'count=2'], { lim: { fileSizeBytes: MIB } });
    expect(big).toMatchObject({ status: 'signaled', signal: 'SIGXFSZ' });
    expect(big.message).toMatch(/file size/);

    const small = await createIsolation({ workRoot, workDirBytes: 4 * MIB });
    const w = await small.createWorkDir();
    try {
      const r = await small.run({
        argv: ['/bin/sh', '-c', 'for i in 1 2 3 4 5 6 7 8; do head -c 1048576 /dev/zero > /box/f$i || exit 9; done'],
        workDir: w.path,
        limits: limits(),
      });
      expect(r).toMatchObject({ status: 'ok', code: 9 });
      expect(r.stderr).toMatch(/No space left on device/);
    } finally {
      await w.dispose();
    }
  });

  it('truncates runaway output and still ends promptly', async () => {
    const started = Date.now();
    const r = await run(['/usr/bin/yes', 'spam'], { lim: { outputBytes: 10_000, wallMs: 60_000 } });
    expect(r.stdout.length).toBe(10_000);
    expect(r.stdoutTruncated).toBe(true);
    expect(r).toMatchObject({ status: 'signaled', signal: 'SIGPIPE' });
    expect(r.message).toMatch(/output limit/);
    expect(Date.now() - started).toBeLessThan(30_000); // far from the 60 s wall limit

    // Moderately over the cap: the rest is read and dropped, and the program finishes normally.
    const over = await run(
      [PYTHON, '-c', 'import sys; sys.stdout.write("y" * 100000); sys.stderr.write("e" * 50000); print("end", file=sys.stderr)'],
      {
        lim: { outputBytes: 1000 },
      },
    );
    expect(over).toMatchObject({ status: 'ok', code: 0, stdoutTruncated: true, stderrTruncated: true });
    expect(over.stdout).toBe('y'.repeat(1000));
    expect(over.stderr).toBe('e'.repeat(1000));
  });

  it('reports stdout and stderr interleaved in the order written, cut at the output limit like each stream', async () => {
    const script = 'for i in 1 2 3; do echo "out$i"; sleep 0.1; echo "err$i" >&2; sleep 0.1; done';
    const r = await run(['/bin/sh', '-c', script]);
    expect(r.stdout).toBe('out1\nout2\nout3\n');
    expect(r.output).toBe('out1\nerr1\nout2\nerr2\nout3\nerr3\n');
    const cut = await run(
      [PYTHON, '-c', 'import sys, time; sys.stderr.write("e" * 3000); sys.stderr.flush(); time.sleep(0.2); sys.stdout.write("o" * 3000)'],
      {
        lim: { outputBytes: 1000 },
      },
    );
    expect(cut.output).toBe(`${'e'.repeat(1000)}${'o'.repeat(1000)}`);
  });

  it("runs 8 programs in parallel that see neither each other's files nor processes", async () => {
    const ws = await Promise.all(Array.from({ length: 8 }, () => fresh()));
    const results = await Promise.all(
      ws.map((w, i) =>
        run(['/bin/sh', '-c', `echo ${i} > /box/mine-${i}; sleep 1; ls /box /tmp; echo procs $(ls /proc | grep -c '^[0-9]'); id -u`], {
          workDir: w.path,
        }),
      ),
    );
    const uids = new Set(ws.map((w) => w.uid));
    expect(uids.size).toBe(8);
    results.forEach((r, i) => {
      expect(r.status).toBe('ok');
      const files = r.stdout.split('\n').filter((l) => l.startsWith('mine-'));
      expect(files).toEqual([`mine-${i}`]);
      // Inside: the reaper, sh, and the ls/grep of the command substitution; never another run's processes.
      expect(Number(/procs (\d+)/.exec(r.stdout)?.[1])).toBeLessThanOrEqual(5);
      expect(r.stdout.trim().split('\n').pop()).toBe(String(ws[i].uid));
    });
  });

  it("aborts a run at once when the caller's AbortSignal fires", async () => {
    const marker = `${2000 + Math.floor(Math.random() * 1000)}.${Date.now() % 1_000_000}`;
    const ac = new AbortController();
    const pending = run(['/bin/sh', '-c', `sleep ${marker} & sleep ${marker}`], { signal: ac.signal, lim: { wallMs: 60_000 } });
    await until('the program to start', () => processesWith(`sleep\0${marker}`).length === 2);
    const started = Date.now();
    ac.abort();
    const r = await pending;
    expect(r).toMatchObject({ status: 'aborted', signal: 'SIGKILL', code: null });
    expect(Date.now() - started).toBeLessThan(5000);
    expect(processesWith(`sleep\0${marker}`)).toEqual([]);

    const already = await run(['/bin/true'], { signal: AbortSignal.abort() });
    expect(already.status).toBe('aborted');
  });

  it('ends the runs of a work dir that is disposed of, then removes it', async () => {
    const w = await iso.createWorkDir();
    const pending = run(['/bin/sh', '-c', 'echo started; sleep 60'], { workDir: w.path, lim: { wallMs: 60_000 } });
    await until('the program to start', () => processesOf(w.uid!).length > 1);
    await w.dispose();
    expect(await pending).toMatchObject({ status: 'aborted', signal: 'SIGKILL' });
    expect(existsSync(w.path)).toBe(false);
    expect(processesOf(w.uid!)).toEqual([]);
  });

  it('reports a missing program as an error, and refuses a work dir it did not create', async () => {
    const r = await run(['/box/does-not-exist']);
    expect(r.status).toBe('error');
    expect(r.message).toMatch(/does-not-exist.*No such file/);
    await expect(iso.run({ argv: ['/bin/true'], workDir: tmpdir(), limits: limits() })).rejects.toThrow(/createWorkDir/);
  });

  it('takes its sandboxes with it when the Node process dies (SIGKILL), and the next start cleans up its work dir', async () => {
    const marker = `${3000 + Math.floor(Math.random() * 1000)}.${Date.now() % 1_000_000}`;
    const script = path.join(workRoot, `dying-${unique()}.mts`);
    writeFileSync(
      script,
      `import { createIsolation } from ${JSON.stringify(path.resolve('src/platform/isolation/index.ts'))};
const iso = await createIsolation({ workRoot: ${JSON.stringify(workRoot)} });
const w = await iso.createWorkDir();
console.log(w.path);
void iso.run({ argv: ['/bin/sh', '-c', 'sleep ${marker} & sleep ${marker}'], workDir: w.path,
  limits: { wallMs: 120000, cpuMs: 120000, memoryBytes: 64 << 20, pids: 16, fileSizeBytes: 1 << 20, openFiles: 64, outputBytes: 1000 } });
`,
    );
    const child = spawn(process.execPath, ['--import', 'tsx', script], { cwd: process.cwd(), stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    try {
      await until('the sandboxed sleeps to start', () => processesWith(`sleep\0${marker}`).length === 2, 60_000); // a slow (emulated) guest needs most of a minute to start Node
      child.kill('SIGKILL');
      await until('the sandbox to die with its Node process', () => processesWith(`sleep\0${marker}`).length === 0);
      await until('its cgroups to be removed', () => leakedCgroups().length === 0);
    } finally {
      child.kill('SIGKILL');
    }
    const orphanDir = out.trim();
    expect(orphanDir.startsWith(workRoot)).toBe(true);
    expect(existsSync(orphanDir)).toBe(true); // still mounted: nobody was left to dispose of it
    await createIsolation({ workRoot, selfTest: false }); // a new start sweeps what dead processes left
    expect(existsSync(orphanDir)).toBe(false);
  });

  it('leaves no processes and no cgroups behind', async () => {
    for (const d of dirs) expect(processesOf(d.uid!)).toEqual([]);
    expect(leakedCgroups()).toEqual([]);
  });
});
