/**
 * What a benchmark reports besides its printed table: its summary line and its figures, kept as JSON under
 * bench/results/ (one file per benchmark, the latest run) so a later run can `--compare` against the figures
 * last committed.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, release, totalmem } from 'node:os';
import path from 'node:path';

/** One aim of a benchmark: the figure it is about, the target as written, and whether this run met it. */
export interface Aim {
  name: string;
  figure: string;
  target: string;
  met: boolean;
}

/**
 * A benchmark's outcome. `figures` is flat: `<what>.<measure>` → number, with the unit in the name
 * (`json.added_median_ms`, `ratio`, `hangar.req_s`). Ratios and CPU per call are the figures to compare across
 * machines; absolute rates are kept for context.
 */
export interface BenchOutcome {
  summary: string;
  figures: Record<string, number>;
  aims?: Aim[];
}

/** The file kept for one benchmark's latest run. */
export interface BenchRecord {
  benchmark: string;
  commit: string | null;
  /** The working tree had changes the commit does not hold. */
  dirty: boolean;
  date: string;
  machine: { cores: number; cpu: string; memoryGiB: number; kernel: string; node: string };
  args: string[];
  summary: string;
  figures: Record<string, number>;
  aims: Aim[];
}

const git = (root: string, args: string[]): string | null => {
  try {
    return execFileSync('git', args, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return null;
  }
};

export function machine(): BenchRecord['machine'] {
  const c = cpus();
  return {
    cores: c.length,
    cpu: c[0]?.model.trim() ?? 'unknown',
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    kernel: release(),
    node: process.version,
  };
}

export function toOutcome(result: string | BenchOutcome): BenchOutcome {
  return typeof result === 'string' ? { summary: result, figures: {} } : result;
}

export function record(root: string, name: string, args: string[], outcome: BenchOutcome): BenchRecord {
  const commit = git(root, ['rev-parse', 'HEAD'])?.trim() ?? null;
  // The results files themselves do not make a run dirty: an earlier benchmark of the same `npm run bench` wrote them.
  const status = git(root, ['status', '--porcelain', '--untracked-files=no', '--', 'src', 'bench', 'native', 'package-lock.json', ':!bench/results']);
  return {
    benchmark: name,
    commit,
    dirty: !!status?.trim(),
    date: new Date().toISOString(),
    machine: machine(),
    args,
    summary: outcome.summary,
    figures: outcome.figures,
    aims: outcome.aims ?? [],
  };
}

export const resultsDir = (root: string) => path.join(root, 'bench', 'results');
const fileOf = (root: string, name: string) => path.join(resultsDir(root), `${name}.json`);

export function save(root: string, rec: BenchRecord): string {
  mkdirSync(resultsDir(root), { recursive: true });
  const file = fileOf(root, rec.benchmark);
  writeFileSync(file, `${JSON.stringify(rec, null, 2)}\n`);
  return file;
}

/** The results last committed for a benchmark (HEAD's file), else the file on disk, else none. */
export function lastCommitted(root: string, name: string): BenchRecord | null {
  const text = git(root, ['show', `HEAD:bench/results/${name}.json`]);
  if (text) return JSON.parse(text) as BenchRecord;
  try {
    return JSON.parse(readFileSync(fileOf(root, name), 'utf8')) as BenchRecord;
  } catch {
    return null;
  }
}

/**
 * Whether a larger value of a figure is better, from the last part of its name: times, CPU, latency and what is
 * added are better smaller (`_ms`, `_us`, `cpu`, `latency`, `overhead`, `added`), rates and other ratios better
 * larger (`_s` as in `req_s`, `per_s`, `ratio`). Null when the name says neither (printed without a verdict).
 */
export function higherIsBetter(figure: string): boolean | null {
  const last = figure.split('.').pop()!;
  if (/_ms$|_us$|cpu|latency|overhead|added/.test(last)) return false;
  if (/_s$|per_s|ratio/.test(last)) return true;
  return null;
}

/** The change of each figure against the earlier record, as printable rows; a change beyond `noise` is flagged. */
export function compare(before: BenchRecord, after: BenchRecord, noise = 0.1): string[] {
  const rows: string[][] = [['figure', 'before', 'after', 'change', '']];
  const names = [...new Set([...Object.keys(before.figures), ...Object.keys(after.figures)])];
  for (const n of names) {
    const a = before.figures[n];
    const b = after.figures[n];
    if (a === undefined || b === undefined) {
      rows.push([n, a === undefined ? '-' : fmt(a), b === undefined ? '-' : fmt(b), a === undefined ? 'new' : 'gone', '']);
      continue;
    }
    const change = a === 0 ? (b === 0 ? 0 : Number.POSITIVE_INFINITY) : (b - a) / Math.abs(a);
    const up = higherIsBetter(n);
    let verdict = '';
    if (Math.abs(change) > noise && up !== null) verdict = change > 0 === up ? 'better' : 'WORSE';
    rows.push([n, fmt(a), fmt(b), Number.isFinite(change) ? `${change >= 0 ? '+' : ''}${(change * 100).toFixed(1)}%` : 'n/a', verdict]);
  }
  const aimsBefore = new Map(before.aims.map((x) => [x.name, x.met]));
  const aimLines = after.aims
    .filter((x) => aimsBefore.has(x.name) && aimsBefore.get(x.name) !== x.met)
    .map((x) => `aim "${x.name}" (${x.target}): ${x.met ? 'now met' : 'NO LONGER met'}`);
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const lines = rows.map((r) =>
    r
      .map((c, i) => (i === 0 || i === 4 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join('  ')
      .trimEnd(),
  );
  lines.splice(1, 0, widths.map((w) => '-'.repeat(w)).join('  '));
  const head = `against ${before.commit?.slice(0, 10) ?? 'an uncommitted run'} of ${before.date.slice(0, 10)} (${before.machine.cores} cores, ${before.machine.cpu})`;
  const sameMachine = before.machine.cores === after.machine.cores && before.machine.cpu === after.machine.cpu;
  return [head, ...(sameMachine ? [] : ['another machine: compare the ratios, not the absolute figures']), ...lines, ...aimLines];
}

function fmt(n: number): string {
  if (Number.isInteger(n)) return String(n);
  return Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 1 ? n.toFixed(2) : n.toPrecision(2);
}

// ---- README's performance section ------------------------------------------------------------

const START = '<!-- bench-results:start (written by `npm run bench` from bench/results/*.json; do not edit) -->';
const END = '<!-- bench-results:end -->';

/** Every kept result, by benchmark name. */
export function allRecords(root: string): BenchRecord[] {
  let files: string[];
  try {
    files = readdirSync(resultsDir(root)).filter((f) => f.endsWith('.json'));
  } catch {
    return [];
  }
  return files.sort().map((f) => JSON.parse(readFileSync(path.join(resultsDir(root), f), 'utf8')) as BenchRecord);
}

/** The table README shows: one row per benchmark, its summary, its aims and where it was measured. */
export function renderResults(records: BenchRecord[]): string {
  const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
  const rows = records.map((r) => {
    const met = r.aims.filter((a) => a.met).length;
    const aims = r.aims.length
      ? `${met}/${r.aims.length}${
          met < r.aims.length
            ? ` (not met: ${r.aims
                .filter((a) => !a.met)
                .map((a) => `${a.name} ${a.target}`)
                .join('; ')})`
            : ''
        }`
      : '';
    const where = `${r.date.slice(0, 10)}, ${r.commit ? r.commit.slice(0, 7) : 'uncommitted'}${r.dirty ? '+' : ''}, ${r.machine.cores} cores`;
    return `| \`${r.benchmark}\` | ${cell(r.summary.replace(/^[a-z]+(?: \[[^\]]+\])?: /, ''))} | ${cell(aims)} | ${where} |`;
  });
  return [START, '| benchmark | figures | aims met | measured |', '|---|---|---|---|', ...rows, END].join('\n');
}

/** README with its results block replaced (null when README has no block). */
export function readmeWithResults(readme: string, block: string): string | null {
  const a = readme.indexOf(START);
  const b = readme.indexOf(END);
  if (a < 0 || b < a) return null;
  return readme.slice(0, a) + block + readme.slice(b + END.length);
}

/** Rewrites README's block from the kept results; answers whether it changed. */
export function updateReadme(root: string): boolean {
  const file = path.join(root, 'README.md');
  const before = readFileSync(file, 'utf8');
  const after = readmeWithResults(before, renderResults(allRecords(root)));
  if (after === null || after === before) return false;
  writeFileSync(file, after);
  return true;
}
