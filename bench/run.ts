/**
 * Benchmark dispatcher: `npm run bench` runs every bench/<name>.ts, `npm run bench -- <name> [args]` runs one.
 * A benchmark module exports `description` and `run(args)`, which returns its one-line summary or a
 * `BenchOutcome` (summary, figures, aims). Each run's outcome is written to bench/results/<name>.json (with the
 * commit, date and machine) unless `--no-save`; `--compare` prints the change against the results last committed.
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { compare, lastCommitted, record, save, toOutcome, updateReadme, type BenchOutcome } from './lib/results.js';

export interface Benchmark {
  description: string;
  run(args: string[]): Promise<string | BenchOutcome>;
}

const here = path.dirname(fileURLToPath(import.meta.url));
const available = readdirSync(here)
  .filter((f) => f.endsWith('.ts') && f !== 'run.ts' && !f.startsWith('_') && !f.endsWith('.d.ts'))
  .map((f) => f.slice(0, -3))
  .sort();

const root = path.dirname(here);
// The dispatcher's own flags, wherever they are; the rest goes to the benchmark.
const argv = process.argv.slice(2);
const compareRequested = argv.includes('--compare');
const noSave = argv.includes('--no-save');
const [name, ...args] = argv.filter((a) => a !== '--compare' && a !== '--no-save');
if (name === '--help' || name === '-h' || name === 'help') {
  console.log(
    `Usage: npm run bench [-- [<name>] [options] [--compare] [--no-save]]\n\nBenchmarks: ${available.join(', ')}\n` +
      'Results go to bench/results/<name>.json; --compare prints the change against the last committed results.\nSee bench/README.md.',
  );
  process.exit(0);
}
const selected = name && !name.startsWith('-') ? [name] : available;
for (const n of selected) {
  if (!available.includes(n)) {
    console.error(`unknown benchmark "${n}"; available: ${available.join(', ')}`);
    process.exit(2);
  }
}
const passArgs = name && !name.startsWith('-') ? args : [name, ...args].filter((a): a is string => a !== undefined);

const summaries: string[] = [];
let failed = false;
for (const n of selected) {
  const mod = (await import(pathToFileURL(path.join(here, `${n}.ts`)).href)) as Benchmark;
  console.log(`\n=== ${n}: ${mod.description}`);
  try {
    const outcome = toOutcome(await mod.run(passArgs));
    summaries.push(outcome.summary);
    const rec = record(root, n, passArgs, outcome);
    if (compareRequested) {
      const before = lastCommitted(root, n);
      console.log(`\n${n}: change against the last committed results`);
      console.log(before ? compare(before, rec).join('\n') : '(no committed results for this benchmark yet)');
    }
    if (!noSave) console.log(`${n}: results written to ${path.relative(process.cwd(), save(root, rec))}`);
  } catch (err) {
    failed = true;
    console.error(`${n}: FAILED: ${(err as Error).stack ?? err}`);
    summaries.push(`${n}: FAILED`);
  }
}
if (!noSave && updateReadme(root)) console.log('README.md: performance figures updated from bench/results/');
console.log('');
for (const s of summaries) console.log(s);
process.exit(failed ? 1 : 0);
