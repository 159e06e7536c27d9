/**
 * `isolation`: the cost of the sandbox itself. Median wall time of running /bin/true
 *   - bare: `spawn('/bin/true')` from Node, until 'close';
 *   - run: `isolation.run()` in an existing work dir (cgroups, uid switch, bwrap, reaper, report, cleanup);
 *   - cold: `createWorkDir()` + `run()` + `dispose()` (adds the uid claim and the tmpfs mount/unmount),
 * interleaved ABBA so drift affects all alike. Needs root and a host set up by scripts/setup.sh.
 *
 * Options: --iterations=N (per target, default 50).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { createIsolation, type Isolation, type Limits } from '../src/platform/isolation/index.js';
import type { BenchOutcome } from './lib/results.js';

export const description = 'a sandboxed /bin/true (run, and createWorkDir+run+dispose) vs a bare spawn: median overhead';

const LIMITS: Limits = {
  wallMs: 10_000,
  cpuMs: 10_000,
  memoryBytes: 64 * 1024 * 1024,
  pids: 16,
  fileSizeBytes: 1024 * 1024,
  openFiles: 64,
  outputBytes: 4096,
};

function bare(): Promise<void> {
  return new Promise((resolve, reject) => {
    const c = spawn('/bin/true', [], { stdio: ['pipe', 'pipe', 'pipe'] });
    c.on('error', reject);
    c.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`exit ${code}`))));
  });
}

async function sandboxed(iso: Isolation, workDir: string): Promise<void> {
  const r = await iso.run({ argv: ['/bin/true'], workDir, limits: LIMITS });
  if (r.status !== 'ok' || r.code !== 0) throw new Error(`sandboxed /bin/true: ${r.status} ${r.message}`);
}

async function cold(iso: Isolation): Promise<void> {
  const w = await iso.createWorkDir();
  try {
    await sandboxed(iso, w.path);
  } finally {
    await w.dispose();
  }
}

async function time(fn: () => Promise<void>): Promise<number> {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const ms = (x: number) => `${x.toFixed(2)} ms`;

export async function run(args: string[]): Promise<BenchOutcome> {
  const { values } = parseArgs({ args, options: { iterations: { type: 'string', default: '50' } }, strict: false });
  const n = Number(values.iterations);
  const workRoot = mkdtempSync(path.join(tmpdir(), 'hangar-bench-isolation-'));
  try {
    const iso = await createIsolation({ workRoot });
    if (!iso.available) throw new Error(`isolation unavailable: ${iso.unavailableReason}`);
    const work = await iso.createWorkDir();
    const targets = { bare, run: () => sandboxed(iso, work.path), cold: () => cold(iso) };
    const samples: Record<keyof typeof targets, number[]> = { bare: [], run: [], cold: [] };
    const order = Object.keys(targets) as (keyof typeof targets)[];
    for (let i = 0; i < 5; i++) for (const k of order) await targets[k](); // warm-up
    for (let i = 0; i < n; i++) {
      for (const k of i % 2 ? [...order].reverse() : order) samples[k].push(await time(targets[k]));
    }
    await work.dispose();
    const b = median(samples.bare);
    const r = median(samples.run);
    const c = median(samples.cold);
    console.log(`median of ${n} runs each (ABBA-interleaved)`);
    console.log(`  bare spawn of /bin/true                  ${ms(b)}`);
    console.log(`  isolation.run(/bin/true)                 ${ms(r)}   overhead ${ms(r - b)}   ratio ${(r / b).toFixed(1)}x`);
    console.log(`  createWorkDir + run + dispose            ${ms(c)}   overhead ${ms(c - b)}   ratio ${(c / b).toFixed(1)}x`);
    return {
      summary: `isolation: bare ${ms(b)}, sandboxed run ${ms(r)} (+${ms(r - b)}), with work dir ${ms(c)} (+${ms(c - b)})`,
      figures: {
        'bare.median_ms': b,
        'run.median_ms': r,
        'run.overhead_ms': r - b,
        'run.latency_ratio': r / b,
        'workdir_run.median_ms': c,
        'workdir_run.overhead_ms': c - b,
        'workdir_run.latency_ratio': c / b,
      },
    };
  } finally {
    rmSync(workRoot, { recursive: true, force: true });
  }
}

// Also runnable directly: node --import tsx bench/isolation.ts [--iterations=N]
if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(await run(process.argv.slice(2)));
}
