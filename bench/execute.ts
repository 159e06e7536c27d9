/**
 * `execute`: `POST /v1/execute` against a bare spawn of the same toolchain, in one run on one machine.
 * Three programs: `print("OK")` in Python, hello world in C (the bare baseline compiles with the same gcc
 * flags, then runs the binary), and `console.log` in TypeScript (the bare baseline transpiles with the esbuild
 * binary, then runs Node). For each: median latency of sequential executions (ABBA-interleaved), the
 * overhead in ms and the ratio; then executions per second at concurrency 2, against bare spawns at
 * concurrency 2. The bench is one organization: the server lets it use the whole pool
 * (HANGAR_EXECUTE_ORG_CONCURRENCY = --concurrency), so this measures the sandbox, not the fair share.
 *
 * Options: --iterations=N (sequential executions per target and program, default 40), --duration=S (seconds
 * of each throughput measurement, default 6), --concurrency=N (2), --only=python|c|typescript.
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { startServer, type ServerChild } from './lib/child.js';
import { table } from './lib/load.js';
import type { Aim, BenchOutcome } from './lib/results.js';
import type { HangarInfo } from './servers/hangar.js';

export const description =
  'POST /v1/execute (python print, C hello world, TypeScript console.log) vs a bare spawn of the same toolchain: latency and throughput';

const OVERHEAD_AIM_MS = 10;
const THROUGHPUT_AIM = 0.7;

interface Case {
  name: string;
  request: Record<string, unknown>;
  expected: string;
  /** One bare execution in `dir`, resolving with its stdout. */
  bare(dir: string): Promise<string>;
  setup(dir: string): void;
}

/** Spawns and collects stdout; rejects on a non-zero exit. */
function spawnCollect(argv: string[], cwd: string, env: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (d) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d) => (err += d));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${argv.join(' ')} exited ${code}: ${err}`))));
  });
}

const ENV = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8' };
const C_HELLO = '#include <stdio.h>\nint main(void) { printf("Hello, World!\\n"); return 0; }\n';
const TS_HELLO = 'const msg: string = "OK";\nconsole.log(msg);\n';
const ESBUILD = (() => {
  try {
    const require = createRequire(import.meta.url);
    return createRequire(require.resolve('esbuild')).resolve(`@esbuild/${process.platform}-${process.arch}/bin/esbuild`);
  } catch {
    return 'esbuild';
  }
})();

const CASES: Case[] = [
  {
    name: 'python',
    request: { language: 'python', code: 'print("OK")' },
    expected: 'OK\n',
    setup: (dir) => writeFileSync(path.join(dir, 'main.py'), 'print("OK")\n'),
    bare: (dir) => spawnCollect(['/usr/bin/python3', path.join(dir, 'main.py')], dir, { ...ENV, PYTHONDONTWRITEBYTECODE: '1' }),
  },
  {
    name: 'c',
    request: { language: 'c', code: C_HELLO },
    expected: 'Hello, World!\n',
    setup: (dir) => writeFileSync(path.join(dir, 'main.c'), C_HELLO),
    bare: async (dir) => {
      await spawnCollect(['/usr/bin/gcc', '-std=gnu17', '-O2', '-o', path.join(dir, 'main'), path.join(dir, 'main.c'), '-lm'], dir, ENV);
      return spawnCollect([path.join(dir, 'main')], dir, ENV);
    },
  },
  {
    name: 'typescript',
    request: { language: 'typescript', code: TS_HELLO },
    expected: 'OK\n',
    setup: (dir) => writeFileSync(path.join(dir, 'main.ts'), TS_HELLO),
    bare: async (dir) => {
      await spawnCollect(
        [
          ESBUILD,
          path.join(dir, 'main.ts'),
          '--format=cjs',
          '--platform=node',
          '--target=node20',
          `--outfile=${path.join(dir, 'main.js')}`,
          '--log-level=warning',
        ],
        dir,
        ENV,
      );
      return spawnCollect(['/usr/bin/node', path.join(dir, 'main.js')], dir, ENV);
    },
  },
];

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

function post(server: ServerChild<HangarInfo>, body: Record<string, unknown>): Promise<{ status: number; body: string }> {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${server.url}/v1/execute`,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), 'x-api-key': server.info.apiKey },
      },
      (res) => {
        let data = '';
        res.setEncoding('utf8').on('data', (d) => (data += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: data }));
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

async function viaApi(server: ServerChild<HangarInfo>, c: Case): Promise<string> {
  const res = await post(server, c.request);
  if (res.status !== 200) throw new Error(`POST /v1/execute answered ${res.status}: ${res.body.slice(0, 500)}`);
  const result = JSON.parse(res.body);
  if (result.run?.code !== 0) throw new Error(`the program failed: ${res.body.slice(0, 500)}`);
  return result.run.stdout;
}

async function timed(fn: () => Promise<string>, expected: string): Promise<number> {
  const t0 = performance.now();
  const out = await fn();
  const ms = performance.now() - t0;
  if (out !== expected) throw new Error(`unexpected output ${JSON.stringify(out)}`);
  return ms;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil(0.9 * xs.length) - 1)]!;

/** `workers` loops, each running `fn(worker)` back to back for `seconds`; completed executions per second. */
async function throughput(fn: (worker: number) => Promise<string>, expected: string, workers: number, seconds: number): Promise<number> {
  const end = performance.now() + seconds * 1000;
  let done = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async (_, worker) => {
      while (performance.now() < end) {
        const out = await fn(worker);
        if (out !== expected) throw new Error(`unexpected output ${JSON.stringify(out)}`);
        done++;
      }
    }),
  );
  return done / ((performance.now() - t0) / 1000);
}

export async function run(argv: string[]): Promise<BenchOutcome> {
  const { values } = parseArgs({
    args: argv,
    options: {
      iterations: { type: 'string', default: '40' },
      duration: { type: 'string', default: '6' },
      concurrency: { type: 'string', default: '2' },
      only: { type: 'string' },
    },
    strict: true,
  });
  const iterations = Number(values.iterations);
  const seconds = Number(values.duration);
  const workers = Number(values.concurrency);
  const cases = CASES.filter((c) => !values.only || c.name === values.only);

  const dirs: string[] = [];
  let hangar: ServerChild<HangarInfo> | undefined;
  try {
    process.env.HANGAR_EXECUTE_ORG_CONCURRENCY ??= String(workers);
    process.stdout.write('starting Hangar... ');
    hangar = await startServer<HangarInfo>('hangar', 'hangar.ts', { options: {} });
    console.log(`listening on ${hangar.url}`);
    const runtimes = JSON.parse(
      await new Promise<string>((resolve, reject) =>
        http
          .get(`${hangar!.url}/v1/runtimes`, { headers: { 'x-api-key': hangar!.info.apiKey } }, (res) => {
            let d = '';
            res.setEncoding('utf8').on('data', (x) => (d += x));
            res.on('end', () => resolve(d));
          })
          .on('error', reject),
      ),
    ).data as { language: string; version: string }[];
    console.log(`runtimes: ${runtimes.map((r) => `${r.language} ${r.version}`).join(', ')}`);
    console.log(
      `latency: ${iterations} sequential executions per target (ABBA), after 3 warm-ups; throughput: ${workers} concurrent loops for ${seconds}s per target`,
    );

    const rows: (string | number)[][] = [];
    const summary: string[] = [];
    const figures: Record<string, number> = {};
    const aims: Aim[] = [];
    let met = true;
    for (const c of cases) {
      // One directory per concurrent bare worker: a compiled binary is rewritten on every execution.
      const workerDirs = Array.from({ length: Math.max(1, workers) }, () => mkdtempSync(path.join(tmpdir(), `hangar-bench-exec-${c.name}-`)));
      dirs.push(...workerDirs);
      for (const d of workerDirs) c.setup(d);
      const bare = (worker = 0) => c.bare(workerDirs[worker]!);
      const api = () => viaApi(hangar!, c);
      for (let i = 0; i < 3; i++) {
        await timed(() => bare(), c.expected);
        await timed(api, c.expected);
      }
      const lat = { bare: [] as number[], api: [] as number[] };
      for (let i = 0; i < iterations; i++) {
        const order = i % 2 === 0 ? (['bare', 'api'] as const) : (['api', 'bare'] as const);
        for (const t of order) lat[t].push(await timed(t === 'bare' ? () => bare() : api, c.expected));
      }
      const bareRate = await throughput(bare, c.expected, workers, seconds / 2);
      const apiRate = await throughput(api, c.expected, workers, seconds);
      const bareRate2 = await throughput(bare, c.expected, workers, seconds / 2);
      const bareAvg = (bareRate + bareRate2) / 2;

      const mb = median(lat.bare);
      const ma = median(lat.api);
      const overhead = ma - mb;
      const ratio = apiRate / bareAvg;
      // The issue's aims are for Python hello world; C (compile and run) is reported beside.
      if (c.name === 'python') met &&= overhead <= OVERHEAD_AIM_MS && ratio >= THROUGHPUT_AIM;
      rows.push([`${c.name} bare spawn`, mb.toFixed(1), p90(lat.bare).toFixed(1), '', '', bareAvg.toFixed(1), '']);
      rows.push([
        `${c.name} POST /v1/execute`,
        ma.toFixed(1),
        p90(lat.api).toFixed(1),
        overhead.toFixed(1),
        (ma / mb).toFixed(2),
        apiRate.toFixed(1),
        ratio.toFixed(2),
      ]);
      console.log(
        `  ${c.name}: median ${mb.toFixed(1)} ms bare, ${ma.toFixed(1)} ms API (overhead ${overhead.toFixed(1)} ms, aim <= ${OVERHEAD_AIM_MS}: ${overhead <= OVERHEAD_AIM_MS ? 'met' : 'NOT met'}); ` +
          `${bareAvg.toFixed(1)}/s bare, ${apiRate.toFixed(1)}/s API at concurrency ${workers} (ratio ${ratio.toFixed(2)}, aim >= ${THROUGHPUT_AIM}: ${ratio >= THROUGHPUT_AIM ? 'met' : 'NOT met'})`,
      );
      Object.assign(figures, {
        [`${c.name}.bare_median_ms`]: mb,
        [`${c.name}.api_median_ms`]: ma,
        [`${c.name}.overhead_ms`]: overhead,
        [`${c.name}.latency_ratio`]: ma / mb,
        [`${c.name}.bare_exec_per_s`]: bareAvg,
        [`${c.name}.api_exec_per_s`]: apiRate,
        [`${c.name}.throughput_ratio`]: ratio,
      });
      if (c.name === 'python')
        aims.push(
          { name: `${c.name} overhead`, figure: `${c.name}.overhead_ms`, target: `<= ${OVERHEAD_AIM_MS} ms`, met: overhead <= OVERHEAD_AIM_MS },
          { name: `${c.name} throughput`, figure: `${c.name}.throughput_ratio`, target: `>= ${THROUGHPUT_AIM}`, met: ratio >= THROUGHPUT_AIM },
        );
      summary.push(`${c.name} overhead ${overhead.toFixed(1)} ms (x${(ma / mb).toFixed(2)}), throughput ratio ${ratio.toFixed(2)}`);
    }
    console.log('');
    console.log(table(['target', 'median ms', 'p90 ms', 'overhead ms', 'latency ratio', `exec/s @${workers}`, 'throughput ratio'], rows));
    console.log(`\naims for python (overhead <= ${OVERHEAD_AIM_MS} ms, throughput >= ${THROUGHPUT_AIM} of bare): ${met ? 'met' : 'NOT met'}`);
    return { summary: `execute: ${summary.join('; ')}`, figures, aims };
  } finally {
    agent.destroy();
    if (hangar) await hangar.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
}
