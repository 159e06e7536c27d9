import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { compare, higherIsBetter, lastCommitted, record, save, type BenchRecord } from '../bench/lib/results.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function repo(): string {
  const d = mkdtempSync(path.join(tmpdir(), 'hangar-bench-results-'));
  dirs.push(d);
  const git = (...args: string[]) => execFileSync('git', args, { cwd: d, stdio: 'ignore' });
  git('init', '-q');
  git('config', 'user.email', 'bench@example.test');
  git('config', 'user.name', 'bench');
  mkdirSync(path.join(d, 'src'));
  writeFileSync(path.join(d, 'src', 'a.ts'), 'export {};\n');
  git('add', '.');
  git('commit', '-qm', 'first');
  return d;
}

const rec = (figures: Record<string, number>, aims: BenchRecord['aims'] = []): BenchRecord => ({
  benchmark: 'api',
  commit: 'abc',
  dirty: false,
  date: '2026-11-29T00:00:00.000Z',
  machine: { cores: 2, cpu: 'cpu', memoryGiB: 24, kernel: 'k', node: 'v20' },
  args: [],
  summary: 's',
  figures,
  aims,
});

describe('benchmark results', () => {
  it('reads the direction of a figure from its name', () => {
    expect(higherIsBetter('hangar.req_s')).toBe(true);
    expect(higherIsBetter('ratio_vs_bare')).toBe(true);
    expect(higherIsBetter('python.throughput_ratio')).toBe(true);
    expect(higherIsBetter('durable.many_threads_calls_per_s')).toBe(true);
    expect(higherIsBetter('json.added_median_ms')).toBe(false);
    expect(higherIsBetter('json.cpu_ratio')).toBe(false);
    expect(higherIsBetter('python.latency_ratio')).toBe(false);
    expect(higherIsBetter('hangar.cpu_us_per_req')).toBe(false);
    expect(higherIsBetter('events')).toBeNull();
  });

  it('--compare marks a regression beyond the noise, an improvement, and an aim no longer met', () => {
    const before = rec({ ratio: 0.6, 'json.added_median_ms': 2, 'hangar.req_s': 1000, steady_ms: 10, gone_ms: 1 }, [
      { name: 'ratio', figure: 'ratio', target: '>= 0.5', met: true },
    ]);
    const after = rec({ ratio: 0.45, 'json.added_median_ms': 0.8, 'hangar.req_s': 1050, steady_ms: 10.5, new_s: 3 }, [
      { name: 'ratio', figure: 'ratio', target: '>= 0.5', met: false },
    ]);
    const out = compare(before, after).join('\n');
    const line = (name: string) => out.split('\n').find((l) => l.startsWith(`${name} `)) ?? '';
    expect(line('ratio')).toMatch(/0\.60\s+0\.45\s+-25\.0%\s+WORSE/);
    expect(line('json.added_median_ms')).toMatch(/-60\.0%\s+better/);
    expect(line('hangar.req_s')).toMatch(/\+5\.0%$/);
    expect(line('steady_ms')).not.toMatch(/WORSE|better/);
    expect(line('gone_ms')).toMatch(/gone/);
    expect(line('new_s')).toMatch(/new/);
    expect(out).toContain('aim "ratio" (>= 0.5): NO LONGER met');
  });

  it('compares against the committed file, not one a later run overwrote', () => {
    const root = repo();
    const first = record(root, 'api', ['--duration', '8'], { summary: 'first', figures: { ratio: 0.5 } });
    expect(first.commit).toMatch(/^[0-9a-f]{40}$/);
    expect(first.dirty).toBe(false);
    expect(first.machine.cores).toBeGreaterThan(0);
    save(root, first);
    execFileSync('git', ['add', 'bench'], { cwd: root });
    execFileSync('git', ['commit', '-qm', 'results'], { cwd: root });
    save(root, record(root, 'api', [], { summary: 'second', figures: { ratio: 0.7 } }));
    expect(lastCommitted(root, 'api')?.figures).toEqual({ ratio: 0.5 });
    writeFileSync(path.join(root, 'src', 'a.ts'), 'export const changed = 1;\n');
    expect(record(root, 'api', [], { summary: 'x', figures: {} }).dirty).toBe(true);
    expect(lastCommitted(root, 'other')).toBeNull();
  });
});

describe("README's performance table", () => {
  it('is the one the kept results make (npm run bench rewrites it)', async () => {
    const { allRecords, readmeWithResults, renderResults } = await import('../bench/lib/results.js');
    const { readFileSync } = await import('node:fs');
    const root = path.resolve(import.meta.dirname, '..');
    const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
    const expected = readmeWithResults(readme, renderResults(allRecords(root)));
    expect(expected).not.toBeNull();
    expect(readme).toBe(expected);
  });

  it('shows each benchmark with its figures, its aims and where it was measured', async () => {
    const { renderResults } = await import('../bench/lib/results.js');
    const table = renderResults([
      rec({ ratio: 0.45 }, [
        { name: 'ratio', figure: 'ratio', target: '>= 0.5', met: false },
        { name: 'p99', figure: 'p99_ms', target: '< 50 ms', met: true },
      ]),
    ]);
    expect(table).toContain('| `api` | s | 1/2 (not met: ratio >= 0.5) | 2026-11-29, abc, 2 cores |');
  });
});
