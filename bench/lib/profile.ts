/**
 * Reads a V8 `.cpuprofile` and says where the time went: self time by area (Hangar source file,
 * npm package, Node internals, GC), and the heaviest functions by self and by inclusive time.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { table } from './load.js';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
  /** Added by bench/lib/child.ts: script url → inline source map (data: URL). */
  $sourceMaps?: Record<string, string>;
}

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

/** Decodes a source map's `mappings` into, per generated line, [column, original line] pairs sorted by column. */
function decodeMappings(mappings: string): [number, number][][] {
  const lines: [number, number][][] = [];
  let srcLine = 0;
  for (const lineText of mappings.split(';')) {
    const segs: [number, number][] = [];
    let col = 0;
    for (const seg of lineText.split(',')) {
      if (!seg) continue;
      const values: number[] = [];
      let value = 0;
      let shift = 0;
      for (const ch of seg) {
        const digit = B64.indexOf(ch);
        value += (digit & 31) << shift;
        if (digit & 32) shift += 5;
        else {
          values.push(value & 1 ? -(value >>> 1) : value >>> 1);
          value = 0;
          shift = 0;
        }
      }
      col += values[0]!;
      if (values.length >= 4) {
        srcLine += values[2]!;
        segs.push([col, srcLine]);
      }
    }
    lines.push(segs);
  }
  return lines;
}

/** Maps a generated position to a 1-based original line, through the script's inline source map. */
function sourceLineResolver(maps: Record<string, string>) {
  const decoded = new Map<string, [number, number][][] | null>();
  return (url: string, line: number, column: number): number | undefined => {
    if (!decoded.has(url)) {
      const dataUrl = maps[url];
      let lines: [number, number][][] | null = null;
      if (dataUrl) {
        try {
          const json = JSON.parse(Buffer.from(dataUrl.slice(dataUrl.indexOf(',') + 1), 'base64').toString('utf8'));
          lines = decodeMappings(json.mappings);
        } catch {
          lines = null;
        }
      }
      decoded.set(url, lines);
    }
    const segs = decoded.get(url)?.[line];
    if (!segs?.length) return undefined;
    let best: [number, number] | undefined;
    for (const seg of segs) {
      if (seg[0] <= column) best = seg;
      else break;
    }
    return (best ?? segs[0]!)[1] + 1;
  };
}

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', '..');

function area(cf: CallFrame): string {
  const url = cf.url.replace(/^file:\/\//, '');
  if (!url) {
    if (cf.functionName === '(garbage collector)') return 'GC';
    if (cf.functionName === '(program)') return '(program: native, outside JS)';
    if (cf.functionName === '(idle)') return '(idle)';
    if (cf.functionName === '(root)') return '(root)';
    return 'V8 builtins (JSON, RegExp, ...)';
  }
  const nm = url.lastIndexOf('/node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + '/node_modules/'.length).split('/');
    return rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  if (url.startsWith('node:')) {
    const parts = url.slice(5).split('/');
    return `node:${parts[0] === 'internal' ? `internal/${parts[1] ?? ''}` : parts[0]}`.replace(/\.js$/, '');
  }
  if (url.startsWith(ROOT)) return path.relative(ROOT, url);
  return url;
}

let resolveLine: ReturnType<typeof sourceLineResolver> = () => undefined;

function fnKey(cf: CallFrame): string {
  const name = cf.functionName || '(anonymous)';
  if (!cf.url) return name;
  const file = area(cf);
  if (cf.url.includes('/node_modules/')) {
    const rel = cf.url.slice(cf.url.lastIndexOf('/node_modules/') + '/node_modules/'.length).split('/');
    const inPkg = rel.slice(rel[0]!.startsWith('@') ? 2 : 1).join('/');
    return `${name} ${file}/${inPkg}:${cf.lineNumber + 1}`;
  }
  const line = resolveLine(cf.url, cf.lineNumber, cf.columnNumber) ?? cf.lineNumber + 1;
  return `${name} ${file}:${line}`;
}

export interface ProfileReport {
  totalMs: number;
  areas: [string, number][];
  selfFns: [string, number][];
  inclusiveFns: [string, number][];
  /** Time per bucket, when buckets were given; every sample lands in exactly one. */
  buckets: [string, number][];
}

/**
 * A named share of the time: a sample belongs to the first bucket (in list order) that matches one of
 * the frames on its stack (`name file:line`, as in the function tables), else to `other`.
 */
export interface Bucket {
  label: string;
  match: (frame: string) => boolean;
}

export function analyzeProfile(file: string, buckets: Bucket[] = [], other = 'other'): ProfileReport {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  resolveLine = sourceLineResolver(profile.$sourceMaps ?? {});
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const n of profile.nodes) {
    byId.set(n.id, n);
    for (const c of n.children ?? []) parent.set(c, n.id);
  }
  const self = new Map<number, number>();
  for (let i = 0; i < profile.samples.length; i++) {
    const dt = (profile.timeDeltas[i + 1] ?? 0) / 1000;
    self.set(profile.samples[i]!, (self.get(profile.samples[i]!) ?? 0) + dt);
  }
  const areas = new Map<string, number>();
  const selfFns = new Map<string, number>();
  const inclusive = new Map<string, number>();
  const bucketMs = new Map<string, number>(buckets.map((b) => [b.label, 0]));
  let total = 0;
  for (const [id, ms] of self) {
    const node = byId.get(id)!;
    if (node.callFrame.functionName === '(idle)') continue;
    total += ms;
    const a = area(node.callFrame);
    areas.set(a, (areas.get(a) ?? 0) + ms);
    const k = fnKey(node.callFrame);
    selfFns.set(k, (selfFns.get(k) ?? 0) + ms);
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const key = fnKey(byId.get(cur)!.callFrame);
      if (seen.has(key)) continue;
      seen.add(key);
      inclusive.set(key, (inclusive.get(key) ?? 0) + ms);
    }
    if (buckets.length) {
      const bucket = buckets.find((b) => [...seen].some(b.match))?.label ?? other;
      bucketMs.set(bucket, (bucketMs.get(bucket) ?? 0) + ms);
    }
  }
  const sorted = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]);
  return {
    totalMs: total,
    areas: sorted(areas),
    selfFns: sorted(selfFns),
    inclusiveFns: sorted(inclusive),
    buckets: sorted(bucketMs).filter(([, ms]) => ms > 0),
  };
}

export function formatProfile(r: ProfileReport, top = 25): string {
  const pct = (ms: number) => `${((100 * ms) / r.totalMs).toFixed(1)}%`;
  const rows = (list: [string, number][]) => list.slice(0, top).map(([k, ms]) => [k, ms.toFixed(0), pct(ms)]);
  const inclusive = r.inclusiveFns.filter(([k]) => !k.startsWith('(root)') && !k.startsWith('(program)'));
  const buckets = r.buckets.length ? ['Where the time goes:', table(['bucket', 'ms', 'share'], rows(r.buckets)), ''] : [];
  return [
    `CPU time sampled (excluding idle): ${r.totalMs.toFixed(0)} ms`,
    '',
    ...buckets,
    'Self time by area:',
    table(['area', 'ms', 'share'], rows(r.areas)),
    '',
    'Heaviest functions, self time:',
    table(['function', 'ms', 'share'], rows(r.selfFns)),
    '',
    'Heaviest functions, inclusive time (callee time included):',
    table(['function', 'ms', 'share'], rows(inclusive)),
  ].join('\n');
}

// `node --import tsx bench/lib/profile.ts FILE.cpuprofile` summarizes a saved profile.
if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname)) {
  const file = process.argv[2];
  if (!file) {
    console.error('usage: node --import tsx bench/lib/profile.ts FILE.cpuprofile [TOP]');
    process.exit(2);
  }
  console.log(formatProfile(analyzeProfile(file), Number(process.argv[3] ?? 25)));
}
