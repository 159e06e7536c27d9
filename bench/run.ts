/**
 * Benchmark dispatcher: `npm run bench` runs every bench/<name>.ts, `npm run bench -- <name> [args]` runs one.
 * A benchmark module exports `description` and `run(args)`, which returns its one-line summary.
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export interface Benchmark {
  description: string;
  run(args: string[]): Promise<string>;
}

const here = path.dirname(fileURLToPath(import.meta.url));
const available = readdirSync(here)
  .filter((f) => f.endsWith('.ts') && f !== 'run.ts' && !f.startsWith('_') && !f.endsWith('.d.ts'))
  .map((f) => f.slice(0, -3))
  .sort();

const [name, ...args] = process.argv.slice(2);
if (name === '--help' || name === '-h' || name === 'help') {
  console.log(`Usage: npm run bench [-- <name> [options]]\n\nBenchmarks: ${available.join(', ')}\nSee bench/README.md.`);
  process.exit(0);
}
const selected = name && !name.startsWith('-') ? [name] : available;
for (const n of selected) {
  if (!available.includes(n)) {
    console.error(`unknown benchmark "${n}"; available: ${available.join(', ')}`);
    process.exit(2);
  }
}
const passArgs = name && !name.startsWith('-') ? args : process.argv.slice(2);

const summaries: string[] = [];
let failed = false;
for (const n of selected) {
  const mod = (await import(pathToFileURL(path.join(here, `${n}.ts`)).href)) as Benchmark;
  console.log(`\n=== ${n}: ${mod.description}`);
  try {
    summaries.push(await mod.run(passArgs));
  } catch (err) {
    failed = true;
    console.error(`${n}: FAILED: ${(err as Error).stack ?? err}`);
    summaries.push(`${n}: FAILED`);
  }
}
console.log('');
for (const s of summaries) console.log(s);
process.exit(failed ? 1 : 0);
