/**
 * `sandboxes`: the persistent-sandbox API (runc) against bare runc, in one run on one machine.
 *   (a) bare `runc run` of /bin/true, foreground, on a bundle prepared once (overlay of the product's base layer,
 *       /usr stacked as a second overlay, config from `runc spec`): spawn to exit;
 *   (b) create-to-first-exec: POST /v1/sandboxes `{ network: false }` sent → 200 of the first
 *       POST /v1/sandboxes/{id}/commands `{ cmd: 'true' }`; then DELETE (not timed). ABBA-interleaved with (a);
 *   (c) POST /commands `true` in a running sandbox, against `runc exec <id> /bin/true` on the same container, ABBA;
 *   (d) POST /pause and POST /resume alternately, against `runc pause` / `runc resume` on the same
 *       container as (c), ABBA; and the runtime's own pause()/resume() (the direct freezer write the API does
 *       under its transaction, ADR 0020) in the same rotation, against the same runc baseline.
 *   (e) create-to-first-exec as (b) with `{ network: true }` and no pool (the network namespace comes from the
 *       runtime's spares, HANGAR_SANDBOX_SPARE_NETWORKS, default 2), ABBA against `runc exec` on (c)'s container;
 *   (f) create-to-first-exec from the warm pool (a second Hangar with HANGAR_SANDBOX_POOL=2, ADR 0023), network off
 *       and on: each create waits (untimed) until the pool has an entry of its kind and must take it; ABBA against
 *       `runc exec /bin/true` on a running sandbox of that Hangar.
 * Hangar runs in this process (as test/harness.ts builds it: embedded SQLite in a temp data dir, template prebuild
 * off, so no desktop-ubuntu build competes for the CPU) and is reached over real HTTP on loopback with an API key;
 * its sandbox installation is removed at the end. Needs root, runc, the sandbox agent (scripts/setup.sh).
 *
 * Options: --iterations=N (runs of (a), (b) and pause/resume pairs of (d), default 30), --execs=N (commands of (c), 200).
 * Both can also be set with BENCH_ITERATIONS / BENCH_EXECS.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { POOL_STATE } from '../src/domains/sandboxes/pool.js';
import { ensureBaseLayer } from '../src/platform/sandboxes/base-layer.js';
import { startInProcessHangar, stopInProcessHangar, type InProcessHangar } from './lib/in-process.js';
import { table } from './lib/load.js';

export const description = 'sandbox create-to-first-exec, exec, pause, resume over the API vs bare runc run/exec/pause/resume';

const execFileP = promisify(execFile);

/** Aims from the issue, medians in ms. */
const AIMS = { createToFirstExec: 150, createWithNetwork: 150, fromPool: 30, exec: 20, pause: 20, resume: 20 };
const WARMUPS = 3;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil(0.9 * xs.length) - 1)]!;

async function until(fn: () => boolean | Promise<boolean>, timeoutMs = 120_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error('timed out waiting for the pool or spare namespaces to fill');
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

// ---- HTTP ------------------------------------------------------------------------------------

const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });

interface Api {
  url: string;
  apiKey: string;
}

function request(api: Api, method: string, urlPath: string, body?: unknown): Promise<{ status: number; body: string }> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  const headers: Record<string, string | number> = { 'x-api-key': api.apiKey };
  if (payload !== undefined) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = Buffer.byteLength(payload);
  }
  return new Promise((resolve, reject) => {
    const req = http.request(`${api.url}${urlPath}`, { method, agent, headers }, (res) => {
      let data = '';
      res.setEncoding('utf8').on('data', (d) => (data += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: data }));
    });
    req.on('error', reject);
    req.end(payload);
  });
}

async function expect(api: Api, method: string, urlPath: string, status: number, body?: unknown): Promise<any> {
  const res = await request(api, method, urlPath, body);
  if (res.status !== status) throw new Error(`${method} ${urlPath} answered ${res.status} (expected ${status}): ${res.body.slice(0, 500)}`);
  return res.body ? JSON.parse(res.body) : null;
}

const createSandbox = async (api: Api, network = false): Promise<string> =>
  (await expect(api, 'POST', '/v1/sandboxes', 201, { network })).data.id as string;
const deleteSandbox = (api: Api, id: string) => expect(api, 'DELETE', `/v1/sandboxes/${id}`, 204);

async function runTrue(api: Api, id: string): Promise<void> {
  const r = await expect(api, 'POST', `/v1/sandboxes/${id}/commands`, 200, { cmd: 'true' });
  if (r.data.exitCode !== 0) throw new Error(`"true" in ${id} exited ${r.data.exitCode} (signal ${r.data.signal}): ${r.data.stderr}`);
}

// ---- bare runc -------------------------------------------------------------------------------

/** Spawns `runc args...` with stdio ignored; resolves on exit 0 (the time measured is spawn to close). */
function runc(args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('runc', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.setEncoding('utf8').on('data', (d) => (err += d));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`runc ${args.join(' ')} exited ${code}: ${err.trim()}`))));
  });
}

async function isMountPoint(p: string): Promise<boolean> {
  const info = readFileSync('/proc/self/mountinfo', 'utf8');
  return info.split('\n').some((line) => line.split(' ')[4] === p);
}

/**
 * A bundle for `runc run` of /bin/true: rootfs = overlay of the product's base layer (writable upper in the temp dir),
 * rootfs/usr = overlay of the host's /usr, as RuncRuntime mounts them; config.json = `runc spec` with args, terminal,
 * and root edited (runc makes its own empty network namespace, as for a sandbox without network).
 */
class BareBundle {
  readonly bundle: string;
  readonly stateRoot: string;
  private readonly rootfs: string;
  private n = 0;

  constructor(readonly dir: string) {
    this.bundle = path.join(dir, 'bundle');
    this.stateRoot = path.join(dir, 'state');
    this.rootfs = path.join(this.bundle, 'rootfs');
  }

  async prepare(sandboxDir: string): Promise<void> {
    const { root } = await ensureBaseLayer(sandboxDir);
    for (const d of ['upper/root', 'upper/usr', 'work/root', 'work/usr', 'bundle/rootfs', 'state'])
      mkdirSync(path.join(this.dir, d), { recursive: true });
    const up = (p: string) => path.join(this.dir, p);
    await execFileP('mount', [
      '-t',
      'overlay',
      'overlay',
      '-o',
      `lowerdir=${root},upperdir=${up('upper/root')},workdir=${up('work/root')}`,
      this.rootfs,
    ]);
    await execFileP('mount', [
      '-t',
      'overlay',
      'overlay',
      '-o',
      `lowerdir=/usr,upperdir=${up('upper/usr')},workdir=${up('work/usr')}`,
      path.join(this.rootfs, 'usr'),
    ]);
    await execFileP('runc', ['spec', '--bundle', this.bundle]);
    const file = path.join(this.bundle, 'config.json');
    const spec = JSON.parse(readFileSync(file, 'utf8'));
    spec.process.args = ['/bin/true'];
    spec.process.terminal = false;
    spec.root = { path: this.rootfs, readonly: false };
    spec.linux.namespaces = (spec.linux.namespaces as { type: string; path?: string }[]).map((ns) =>
      ns.type === 'network' ? { type: 'network' } : ns,
    );
    writeFileSync(file, JSON.stringify(spec));
  }

  /** One foreground `runc run`; returns its wall time. runc deletes a foreground container when its process exits. */
  async run(): Promise<number> {
    const id = `hangar-bench-${process.pid}-${this.n++}`;
    try {
      return await timed(() => runc(['--root', this.stateRoot, 'run', '--bundle', this.bundle, id]));
    } finally {
      if (existsSync(path.join(this.stateRoot, id))) await runc(['--root', this.stateRoot, 'delete', '--force', id]).catch(() => undefined);
    }
  }

  /** Deletes leftover containers, unmounts, and removes the temp dir only once nothing is mounted in it. */
  async cleanup(): Promise<void> {
    const { stdout } = await execFileP('runc', ['--root', this.stateRoot, 'list', '-q']).catch(() => ({ stdout: '' }));
    for (const id of stdout.split('\n').filter(Boolean)) await runc(['--root', this.stateRoot, 'delete', '--force', id]).catch(() => undefined);
    for (const target of [path.join(this.rootfs, 'usr'), this.rootfs]) {
      if (await isMountPoint(target)) await execFileP('umount', [target]).catch(() => execFileP('umount', ['-l', target]));
    }
    if ((await isMountPoint(path.join(this.rootfs, 'usr'))) || (await isMountPoint(this.rootfs))) {
      console.error(`sandboxes: ${this.rootfs} is still mounted; leaving ${this.dir} in place`);
      return;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

// ---- Hangar in this process ------------------------------------------------------------------

interface Hangar extends InProcessHangar {
  api: Api;
  stateRoot: string;
}

/** Hangar built in this process as production does (embedded SQLite, silent log, no response validation), with an admin key, on loopback. */
async function startHangar(env: Record<string, string> = {}): Promise<Hangar> {
  const h = await startInProcessHangar('sandboxes', { HANGAR_SANDBOX_DIR: process.env.HANGAR_SANDBOX_DIR, ...env });
  if (!h.deps.sandboxes.available) {
    const reason = h.deps.sandboxes.unavailableReason;
    await stopInProcessHangar(h);
    throw new Error(`persistent sandboxes are unavailable: ${reason}`);
  }
  return { ...h, api: { url: h.url, apiKey: h.apiKey }, stateRoot: path.join('/run/hangar/runc', h.deps.installId) };
}

async function stopHangar(h: Hangar): Promise<void> {
  await stopInProcessHangar(h);
}

// ---- the benchmark ---------------------------------------------------------------------------

interface Row {
  label: string;
  samples: number[];
  /** Samples of the baseline this row's median is compared with. */
  baseline?: number[];
  aim?: number;
  indent?: boolean;
}

export async function run(argv: string[]): Promise<string> {
  const { values } = parseArgs({
    args: argv,
    options: {
      iterations: { type: 'string', default: process.env.BENCH_ITERATIONS ?? '30' },
      execs: { type: 'string', default: process.env.BENCH_EXECS ?? '200' },
    },
    strict: false,
  });
  const iterations = Number(values.iterations);
  const execs = Number(values.execs);
  if (!(iterations > 0) || !(execs > 0)) throw new Error('--iterations and --execs must be positive numbers');
  if (process.getuid?.() !== 0) throw new Error('needs root (runc creates containers)');

  let hangar: Hangar | undefined;
  let pooled: Hangar | undefined;
  let bare: BareBundle | undefined;
  const live = new Set<string>();
  const cleanup = async () => {
    for (const h of [hangar, pooled]) if (h) for (const id of live) await deleteSandbox(h.api, id).catch(() => undefined);
    live.clear();
    agent.destroy();
    for (const h of [hangar, pooled]) {
      if (h) await stopHangar(h).catch((err) => console.error(`sandboxes: Hangar cleanup failed: ${(err as Error).message}`));
    }
    hangar = undefined;
    pooled = undefined;
    if (bare) await bare.cleanup().catch((err) => console.error(`sandboxes: bundle cleanup failed: ${(err as Error).message}`));
    bare = undefined;
  };
  // Containers outlive this process; an interrupted run still removes them.
  const onSignal = () => {
    void cleanup().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  try {
    process.stdout.write('starting Hangar (in process)... ');
    hangar = await startHangar();
    const { api, stateRoot } = hangar;
    console.log(`listening on ${api.url}, runc root ${stateRoot}`);
    bare = new BareBundle(mkdtempSync(path.join(tmpdir(), 'hangar-bench-runc-')));
    await bare.prepare(hangar.deps.config.sandboxes.dir);
    const bareRun = bare;

    /** (b) one create-to-first-exec; the create and first command are also kept apart. */
    const createSamples = { total: [] as number[], create: [] as number[], firstExec: [] as number[] };
    const createToFirstExec = async (record: boolean) => {
      const t0 = performance.now();
      const id = await createSandbox(api);
      live.add(id);
      const t1 = performance.now();
      await runTrue(api, id);
      const t2 = performance.now();
      await deleteSandbox(api, id);
      live.delete(id);
      if (record) {
        createSamples.total.push(t2 - t0);
        createSamples.create.push(t1 - t0);
        createSamples.firstExec.push(t2 - t1);
      }
    };

    // (a) and (b), ABBA.
    console.log(`(a)+(b): ${iterations} bare runc runs and ${iterations} create-to-first-exec (ABBA), after ${WARMUPS} warm-ups each`);
    for (let i = 0; i < WARMUPS; i++) {
      await bareRun.run();
      await createToFirstExec(false);
    }
    const runSamples: number[] = [];
    for (let i = 0; i < iterations; i++) {
      const steps = [async () => runSamples.push(await bareRun.run()), () => createToFirstExec(true)];
      for (const step of i % 2 === 0 ? steps : steps.reverse()) await step();
    }

    // (c) exec in a running sandbox, against runc exec on the same container, ABBA.
    console.log(`(c): ${execs} POST /commands "true" and ${execs} runc exec /bin/true on one running sandbox (ABBA), after ${WARMUPS} warm-ups each`);
    const sbx = await createSandbox(api);
    live.add(sbx);
    const runcExec = () => runc(['--root', stateRoot, 'exec', sbx, '/bin/true']);
    for (let i = 0; i < WARMUPS; i++) {
      await runTrue(api, sbx);
      await runcExec();
    }
    const exec = { api: [] as number[], bare: [] as number[] };
    for (let i = 0; i < execs; i++) {
      const steps = [async () => exec.api.push(await timed(() => runTrue(api, sbx))), async () => exec.bare.push(await timed(runcExec))];
      for (const step of i % 2 === 0 ? steps : steps.reverse()) await step();
    }

    // (e) create-to-first-exec with network, no pool, ABBA with runc exec on (c)'s container.
    const hasNetwork = !hangar.deps.sandboxes.networkReason;
    const withNet = { total: [] as number[], bare: [] as number[] };
    if (hasNetwork) {
      console.log(`(e): ${iterations} create-to-first-exec with network (no pool) and ${iterations} runc exec (ABBA), after ${WARMUPS} warm-ups`);
      const once = async (record: boolean) => {
        await until(async () => (hangar!.deps.sandboxes as unknown as { network?: { spares: unknown[] } }).network?.spares.length === 2);
        const t0 = performance.now();
        const id = await createSandbox(api, true);
        live.add(id);
        await runTrue(api, id);
        const t = performance.now() - t0;
        await deleteSandbox(api, id);
        live.delete(id);
        if (record) withNet.total.push(t);
      };
      for (let i = 0; i < WARMUPS; i++) await once(false);
      for (let i = 0; i < iterations; i++) {
        const steps = [() => once(true), async () => withNet.bare.push(await timed(runcExec))];
        for (const step of i % 2 === 0 ? steps : steps.reverse()) await step();
      }
    } else console.log(`(e): skipped, sandboxes have no network on this host: ${hangar.deps.sandboxes.networkReason}`);

    // (d) pause/resume pairs over the API and with bare runc, ABBA. Bare pairs leave the container running, as recorded.
    console.log(`(d): ${iterations} POST /pause + /resume pairs and ${iterations} runc pause + resume pairs on the same sandbox (ABBA)`);
    const pr = {
      pause: [] as number[],
      resume: [] as number[],
      barePause: [] as number[],
      bareResume: [] as number[],
      rtPause: [] as number[],
      rtResume: [] as number[],
    };
    const runtime = hangar.deps.sandboxes;
    const runtimePair = async (record: boolean) => {
      const p = await timed(() => runtime.pause(sbx));
      const r = await timed(() => runtime.resume(sbx));
      if (record) {
        pr.rtPause.push(p);
        pr.rtResume.push(r);
      }
    };
    const apiPair = async (record: boolean) => {
      const p = await timed(() => expect(api, 'POST', `/v1/sandboxes/${sbx}/pause`, 200));
      const r = await timed(() => expect(api, 'POST', `/v1/sandboxes/${sbx}/resume`, 200));
      if (record) {
        pr.pause.push(p);
        pr.resume.push(r);
      }
    };
    const barePair = async (record: boolean) => {
      const p = await timed(() => runc(['--root', stateRoot, 'pause', sbx]));
      const r = await timed(() => runc(['--root', stateRoot, 'resume', sbx]));
      if (record) {
        pr.barePause.push(p);
        pr.bareResume.push(r);
      }
    };
    for (let i = 0; i < WARMUPS; i++) {
      await apiPair(false);
      await barePair(false);
      await runtimePair(false);
    }
    for (let i = 0; i < iterations; i++) {
      const steps = [() => apiPair(true), () => barePair(true), () => runtimePair(true)];
      for (const step of i % 2 === 0 ? steps : steps.reverse()) await step();
    }
    await runTrue(api, sbx); // still usable after all that
    await deleteSandbox(api, sbx);
    live.delete(sbx);
    await stopHangar(hangar);
    hangar = undefined;

    // (f) from the warm pool, network off and on, ABBA with runc exec on a running sandbox of the pooled Hangar.
    process.stdout.write('starting a second Hangar with a warm pool (HANGAR_SANDBOX_POOL=2)... ');
    pooled = await startHangar({ HANGAR_SANDBOX_POOL: '2', HANGAR_SANDBOX_POOL_MIN_FREE_MEMORY_MB: '0' });
    const p = pooled;
    console.log(`listening on ${p.api.url}`);
    const ready = (network: boolean) => p.deps.state.get(POOL_STATE).ready.filter((e) => e.network === network);
    await until(() => ready(false).length === 2 && (!hasNetwork || ready(true).length === 2));
    const psbx = await createSandbox(p.api);
    live.add(psbx);
    const poolExec = () => runc(['--root', p.stateRoot, 'exec', psbx, '/bin/true']);
    const fromPool = { off: [] as number[], on: [] as number[], bare: [] as number[] };
    const claimOnce = async (network: boolean, record: boolean) => {
      await until(() => ready(network).length === 2);
      const ids = new Set(ready(network).map((e) => e.id));
      const t0 = performance.now();
      const id = await createSandbox(p.api, network);
      live.add(id);
      await runTrue(p.api, id);
      const t = performance.now() - t0;
      if (!ids.has(id)) throw new Error(`sandbox ${id} was not taken from the pool`);
      await deleteSandbox(p.api, id);
      live.delete(id);
      if (record) (network ? fromPool.on : fromPool.off).push(t);
    };
    const modes = hasNetwork ? [false, true] : [false];
    console.log(
      `(f): ${iterations} create-to-first-exec from the pool per network mode (${modes.length}) and runc exec (ABBA), after ${WARMUPS} warm-ups`,
    );
    for (let i = 0; i < WARMUPS; i++) for (const network of modes) await claimOnce(network, false);
    for (let i = 0; i < iterations; i++) {
      for (const network of modes) {
        const steps = [() => claimOnce(network, true), async () => fromPool.bare.push(await timed(poolExec))];
        for (const step of i % 2 === 0 ? steps : steps.reverse()) await step();
      }
    }
    await deleteSandbox(p.api, psbx);
    live.delete(psbx);

    const rows: Row[] = [
      { label: '(a) bare runc run /bin/true', samples: runSamples },
      { label: '(b) API create -> first exec', samples: createSamples.total, baseline: runSamples, aim: AIMS.createToFirstExec },
      { label: '    POST /v1/sandboxes (201)', samples: createSamples.create, baseline: runSamples },
      { label: '    first POST /commands', samples: createSamples.firstExec },
      { label: '(c) bare runc exec /bin/true', samples: exec.bare },
      { label: '(c) API exec: POST /commands true', samples: exec.api, baseline: exec.bare, aim: AIMS.exec },
      ...(hasNetwork
        ? [{ label: '(e) create -> first exec, network, no pool', samples: withNet.total, baseline: withNet.bare, aim: AIMS.createWithNetwork }]
        : []),
      { label: '(f) bare runc exec /bin/true (pool Hangar)', samples: fromPool.bare },
      { label: '(f) from pool, network off', samples: fromPool.off, baseline: fromPool.bare, aim: AIMS.fromPool },
      ...(hasNetwork ? [{ label: '(f) from pool, network on', samples: fromPool.on, baseline: fromPool.bare, aim: AIMS.fromPool }] : []),
      { label: '(d) bare runc pause', samples: pr.barePause },
      { label: '(d) API POST /pause', samples: pr.pause, baseline: pr.barePause, aim: AIMS.pause },
      { label: '(d) bare runc resume', samples: pr.bareResume },
      { label: '(d) API POST /resume', samples: pr.resume, baseline: pr.bareResume, aim: AIMS.resume },
      { label: '(d) runtime pause() (freezer)', samples: pr.rtPause, baseline: pr.barePause },
      { label: '(d) runtime resume() (freezer)', samples: pr.rtResume, baseline: pr.bareResume },
    ];
    const f = (x: number) => x.toFixed(1);
    console.log('');
    console.log(
      table(
        ['target', 'n', 'median ms', 'p90 ms', 'vs its bare baseline (median)', 'aim (median)', 'result'],
        rows.map((r) => {
          const m = median(r.samples);
          return [
            r.label,
            r.samples.length,
            f(m),
            f(p90(r.samples)),
            r.baseline
              ? `x${(m / median(r.baseline)).toFixed(2)} (${m >= median(r.baseline) ? '+' : '-'}${f(Math.abs(m - median(r.baseline)))})`
              : '',
            r.aim ? `< ${r.aim} ms` : '',
            r.aim ? (m < r.aim ? 'aim met' : 'aim NOT met') : '',
          ];
        }),
      ),
    );
    const aimed = rows.filter((r) => r.aim);
    const met = aimed.filter((r) => median(r.samples) < r.aim!).length;
    console.log(`\naims met: ${met}/${aimed.length}`);
    const m = (xs: number[]) => `${f(median(xs))} ms`;
    return (
      `sandboxes: create->first exec ${m(createSamples.total)} (x${(median(createSamples.total) / median(runSamples)).toFixed(2)} of bare runc run ${m(runSamples)}), ` +
      `exec ${m(exec.api)} (runc exec ${m(exec.bare)}), pause ${m(pr.pause)}, resume ${m(pr.resume)}; ` +
      `${hasNetwork ? `with network, no pool ${m(withNet.total)}; ` : ''}` +
      `from pool ${m(fromPool.off)}${hasNetwork ? ` (network on ${m(fromPool.on)})` : ''}, x${(median(fromPool.off) / median(fromPool.bare)).toFixed(2)} of runc exec ${m(fromPool.bare)}; ` +
      `aims met ${met}/${aimed.length}`
    );
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
  }
}
