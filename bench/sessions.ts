/**
 * `sessions`: context sessions (src/domains/sessions) at the wire, on the embedded SQLite default and on
 * PostgreSQL, with Hangar built in this process (lib/in-process.ts) and driven over HTTP on loopback.
 *   Setup ("load", timed on its own): a session (`POST /v1/aip/sessions`), then --blocks blocks (10,000) added with
 *   `POST /v1/aip/sessions/{id}/blocks/batch`, --batch (1,000) per request. Each block is a few sentences of
 *   generated prose (deterministic PRNG, so every run and both databases get the same corpus), a mix of kinds, one
 *   to three tags, one in 500 pinned.
 *   (1) fork: `POST …/fork { name }` of the whole session, from sending to the full 201 answer; blocks/s = the
 *       blocks copied over that time.
 *   (2) compaction: `POST …/compact { targetTokens: ⌊totalTokens / 2⌋, summarizer: 'extractive' }` on the fork
 *       just made (a fresh copy each round, so every round compacts the same 10,000 blocks), deleted untimed after.
 *   --rounds (5) rounds of fork + compaction per database; each round and the median are printed.
 *   (3) tokenizer (first, before any Hangar starts): the corpus counted with Hangar's wrapper (`tokenizer('o200k_base').count`, tokens.ts) and with
 *       gpt-tokenizer called directly (`countTokens` of `gpt-tokenizer/encoding/o200k_base`, `disallowedSpecial`
 *       empty, as the wrapper calls it), --tok-rounds (12) passes of each in ABBA order after a warm-up pass of each.
 * PostgreSQL: HANGAR_TEST_DATABASE_URL or postgres://postgres@127.0.0.1:5432/test, in a schema of its own
 * (`bench_sessions_<pid>_<random>`) dropped at the end; when it cannot be reached a line says so and it is skipped.
 * Options: --blocks N (10000), --batch N (1000), --rounds N (5), --tok-rounds N (12), --db sqlite,postgres (or none: the tokenizer only).
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import pg from 'pg';
import { tokenizer } from '../src/domains/sessions/tokens.js';
import { startInProcessHangar, stopInProcessHangar, type InProcessHangar } from './lib/in-process.js';
import { table } from './lib/load.js';

export const description =
  'context sessions: load, fork and extractive compaction of a 10,000-block session (SQLite, PostgreSQL); tokenizer wrapper vs gpt-tokenizer';

const PG_URL = process.env.HANGAR_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const PLAIN = { disallowedSpecial: new Set<string>() };

function positive(name: string, v: string | undefined): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer`);
  return n;
}

const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const int = (n: number) => Math.round(n).toLocaleString('en-US');
const ms = (n: number) => n.toFixed(n < 10 ? 1 : 0);

// ---- corpus ----

/** mulberry32: a small deterministic PRNG, so the corpus is the same in every run. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SUBJECTS = [
  'The deployment',
  'Our billing service',
  'The customer from Lyon',
  'Maria',
  'The nightly import job',
  'The onboarding flow',
  'The search index',
  'The mobile client',
  'Kenji on the platform team',
  'The quarterly report',
  'The payment webhook',
  'The staging cluster',
];
const VERBS = [
  'failed again after',
  'was rolled back because of',
  'needs a decision on',
  'reported a regression in',
  'is blocked by',
  'finished well ahead of',
  'doubled its latency during',
  'asked for a summary of',
  'depends on',
  'should be reviewed before',
];
const OBJECTS = [
  'the migration to PostgreSQL 16',
  'the rate limiter change',
  'invoice INV-{n}',
  'the retry policy for queued messages',
  'ticket #{n}',
  'the new pricing tiers',
  'the GDPR export request',
  'the cache eviction settings',
  'release v{v}',
  'the contract renewal with Acme Corp',
  'the flaky end-to-end test',
  'the OAuth consent screen',
];
const TAILS = [
  'on Tuesday',
  'at 03:{m} UTC',
  'according to the logs',
  'which nobody expected',
  'and the on-call engineer was paged',
  'so we postponed the launch',
  'with about {p}% of requests affected',
  'before the freeze',
  '',
  '',
];
const ASIDES = [
  'Error code E{n} was returned by `POST /v1/orders`.',
  'The fix is tracked in the incident doc.',
  'Action item: confirm with finance by Friday.',
  'Open question: do we keep the old endpoint for another month?',
  'Décision : on garde la configuration actuelle.',
  'Numbers: p50 {m} ms, p99 {n} ms, {p}% cache hits.',
  'See `config/limits.yaml`, line {m}.',
  'The user said "it worked yesterday" twice.',
];
const KINDS = ['message', 'message', 'message', 'document', 'tool_result', 'note'] as const;
const TAGS = ['billing', 'infra', 'customer', 'incident', 'planning', 'search', 'mobile', 'security', 'release', 'support'];

interface BlockIn {
  kind: (typeof KINDS)[number];
  content: string;
  tags: string[];
  pinned: boolean;
}

function corpus(n: number): BlockIn[] {
  const r = prng(0x5e55_1042);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
  const fill = (s: string) =>
    s
      .replace('{n}', String(1000 + Math.floor(r() * 90000)))
      .replace('{m}', String(10 + Math.floor(r() * 50)))
      .replace('{p}', String(1 + Math.floor(r() * 60)))
      .replace('{v}', `${1 + Math.floor(r() * 4)}.${Math.floor(r() * 20)}.${Math.floor(r() * 10)}`);
  const blocks: BlockIn[] = [];
  for (let i = 0; i < n; i++) {
    const sentences: string[] = [];
    const count = 2 + Math.floor(r() * 4);
    for (let s = 0; s < count; s++) {
      if (r() < 0.25) sentences.push(fill(pick(ASIDES)));
      else {
        const tail = fill(pick(TAILS));
        sentences.push(`${pick(SUBJECTS)} ${pick(VERBS)} ${fill(pick(OBJECTS))}${tail ? ` ${tail}` : ''}.`);
      }
    }
    const tags = [...new Set(Array.from({ length: 1 + Math.floor(r() * 3) }, () => pick(TAGS)))];
    blocks.push({ kind: pick(KINDS), content: sentences.join(' '), tags, pinned: i % 500 === 7 });
  }
  return blocks;
}

// ---- HTTP ----

async function api<T>(h: InProcessHangar, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${h.url}${path}`, {
    method,
    headers: { 'x-api-key': h.apiKey, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
  return JSON.parse(text).data as T;
}

interface Metrics {
  totalTokens: number;
  blockCount: number;
}
interface Compaction {
  previousTokens: number;
  newTokens: number;
  blocksCompacted: number;
  summariesCreated: number;
  summarizer: string;
}

interface DbResult {
  db: string;
  load: { ms: number; blocks: number; tokens: number; batchMs: number[] };
  forks: number[];
  compactions: { ms: number; result: Compaction; target: number }[];
}

async function benchDb(db: 'sqlite' | 'postgres', blocks: BlockIn[], batch: number, rounds: number): Promise<DbResult | string> {
  let schema: string | undefined;
  const env: Record<string, string> = {};
  if (db === 'postgres') {
    const client = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 3000 });
    try {
      await client.connect();
      await client.query('SELECT 1');
    } catch (err) {
      return `postgresql: SKIPPED (${PG_URL.replace(/\/\/[^@/]*@/, '//…@')} unreachable: ${(err as Error).message})`;
    } finally {
      await client.end().catch(() => undefined);
    }
    schema = `bench_sessions_${process.pid}_${randomBytes(3).toString('hex')}`;
    env.DATABASE_URL = `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}schema=${schema}`;
  }
  let hangar: InProcessHangar | undefined;
  try {
    process.stdout.write(`${db}: starting Hangar (in process)${schema ? `, schema ${schema}` : ''}... `);
    hangar = await startInProcessHangar(`sessions-${db}`, env);
    const h = hangar;
    console.log(`on ${h.url}`);

    const session = await api<{ id: string }>(h, 'POST', '/v1/aip/sessions', { name: 'bench source', tags: ['bench'] });
    const batchMs: number[] = [];
    let tokens = 0;
    const l0 = performance.now();
    for (let i = 0; i < blocks.length; i += batch) {
      const t0 = performance.now();
      const added = await api<{ tokens: number }[]>(h, 'POST', `/v1/aip/sessions/${session.id}/blocks/batch`, { blocks: blocks.slice(i, i + batch) });
      batchMs.push(performance.now() - t0);
      tokens += added.reduce((n, b) => n + b.tokens, 0);
    }
    const loadMs = performance.now() - l0;
    const source = await api<{ metrics: Metrics; pinnedBlocks: string[] }>(h, 'GET', `/v1/aip/sessions/${session.id}`);
    if (source.metrics.blockCount !== blocks.length || source.metrics.totalTokens !== tokens)
      throw new Error(
        `the session holds ${source.metrics.blockCount} blocks, ${source.metrics.totalTokens} tokens; expected ${blocks.length}, ${tokens}`,
      );
    console.log(
      `${db}: loaded ${int(blocks.length)} blocks (${int(tokens)} tokens, ${source.pinnedBlocks.length} pinned) in ${ms(loadMs)} ms; per batch of ${batch}: ${batchMs.map(ms).join(', ')} ms`,
    );

    const forks: number[] = [];
    const compactions: DbResult['compactions'] = [];
    for (let r = 1; r <= rounds; r++) {
      let t0 = performance.now();
      const fork = await api<{ id: string; metrics: Metrics }>(h, 'POST', `/v1/aip/sessions/${session.id}/fork`, { name: `bench fork ${r}` });
      const forkMs = performance.now() - t0;
      if (fork.metrics.blockCount !== blocks.length || fork.metrics.totalTokens !== tokens)
        throw new Error(
          `fork ${r} holds ${fork.metrics.blockCount} blocks, ${fork.metrics.totalTokens} tokens; expected ${blocks.length}, ${tokens}`,
        );
      forks.push(forkMs);
      const target = Math.floor(fork.metrics.totalTokens / 2);
      t0 = performance.now();
      const result = await api<Compaction>(h, 'POST', `/v1/aip/sessions/${fork.id}/compact`, { targetTokens: target, summarizer: 'extractive' });
      const compactMs = performance.now() - t0;
      if (result.summarizer !== 'extractive' || result.newTokens > target || result.previousTokens !== tokens)
        throw new Error(`compaction ${r}: ${JSON.stringify(result)} for a target of ${target}`);
      const after = await api<{ metrics: Metrics }>(h, 'GET', `/v1/aip/sessions/${fork.id}`);
      if (after.metrics.totalTokens !== result.newTokens)
        throw new Error(`compaction ${r} answered ${result.newTokens} tokens; the session holds ${after.metrics.totalTokens}`);
      compactions.push({ ms: compactMs, result, target });
      console.log(
        `${db}: round ${r}: fork ${ms(forkMs)} ms; compact ${ms(compactMs)} ms (${int(result.previousTokens)} -> ${int(result.newTokens)} tokens, target ${int(target)}; ${int(result.blocksCompacted)} blocks into ${result.summariesCreated} summaries)`,
      );
      await api(h, 'DELETE', `/v1/aip/sessions/${fork.id}`);
    }
    return { db, load: { ms: loadMs, blocks: blocks.length, tokens, batchMs }, forks, compactions };
  } finally {
    if (hangar) await stopInProcessHangar(hangar).catch((err) => console.error(`sessions: Hangar cleanup failed: ${(err as Error).message}`));
    if (schema) {
      const client = new pg.Client({ connectionString: PG_URL });
      try {
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } catch (err) {
        console.error(`sessions: could not drop schema ${schema}: ${(err as Error).message}`);
      } finally {
        await client.end().catch(() => undefined);
      }
    }
  }
}

// ---- tokenizer ----

async function benchTokenizer(texts: string[], rounds: number) {
  const tk = await tokenizer('o200k_base');
  const passes = {
    wrapper: () => texts.reduce((n, t) => n + tk.count(t), 0),
    direct: () => texts.reduce((n, t) => n + countTokens(t, PLAIN), 0),
  };
  type Which = keyof typeof passes;
  const timed = (w: Which) => {
    const t0 = performance.now();
    const tokens = passes[w]();
    return { tokens, ms: performance.now() - t0 };
  };
  const warmDirect = timed('direct');
  const warm = { direct: warmDirect, wrapper: timed('wrapper') };
  if (warm.wrapper.tokens !== warm.direct.tokens)
    throw new Error(`the wrapper counted ${warm.wrapper.tokens} tokens, gpt-tokenizer ${warm.direct.tokens}`);
  const samples: Record<Which, number[]> = { wrapper: [], direct: [] };
  for (let r = 0; r < rounds; r++) {
    const order: Which[] = r % 2 === 0 ? ['direct', 'wrapper'] : ['wrapper', 'direct'];
    for (const w of order) {
      const s = timed(w);
      if (s.tokens !== warm.direct.tokens) throw new Error(`${w} counted ${s.tokens} tokens, then ${warm.direct.tokens}`);
      samples[w].push(s.ms);
    }
  }
  return { tokens: warm.direct.tokens, warm, samples };
}

export async function run(argv: string[]): Promise<string> {
  const { values } = parseArgs({
    args: argv,
    options: {
      blocks: { type: 'string', default: '10000' },
      batch: { type: 'string', default: '1000' },
      rounds: { type: 'string', default: '5' },
      'tok-rounds': { type: 'string', default: '12' },
      db: { type: 'string', default: 'sqlite,postgres' },
    },
    strict: true,
  });
  const n = positive('blocks', values.blocks);
  const batch = positive('batch', values.batch);
  if (batch > 1000) throw new Error('--batch must be at most 1000 (the batch route takes up to 1,000 blocks)');
  const rounds = positive('rounds', values.rounds);
  const tokRounds = positive('tok-rounds', values['tok-rounds']);
  const dbs = values.db === 'none' ? [] : values.db.split(',').map((d) => d.trim());
  for (const d of dbs) if (d !== 'sqlite' && d !== 'postgres') throw new Error(`--db: unknown database "${d}" (sqlite, postgres)`);

  const blocks = corpus(n);
  const texts = blocks.map((b) => b.content);
  const chars = texts.reduce((c, t) => c + t.length, 0);
  const biggest = Math.max(
    ...Array.from({ length: Math.ceil(n / batch) }, (_, i) =>
      Buffer.byteLength(JSON.stringify({ blocks: blocks.slice(i * batch, (i + 1) * batch) })),
    ),
  );
  console.log(
    `corpus: ${int(n)} blocks, ${int(chars)} characters (${Math.round(chars / n)} per block), the largest batch body ${int(biggest / 1024)} KiB`,
  );

  console.log(`tokenizer: counting the corpus, a warm-up pass of each, then ${tokRounds} passes of each in ABBA order (before Hangar starts)...`);
  const tok = await benchTokenizer(texts, tokRounds);

  const results: DbResult[] = [];
  const skipped: string[] = [];
  for (const d of dbs) {
    const r = await benchDb(d as 'sqlite' | 'postgres', blocks, batch, rounds);
    if (typeof r === 'string') {
      console.log(r);
      skipped.push(r);
    } else results.push(r);
  }

  const wMed = median(tok.samples.wrapper);
  const dMed = median(tok.samples.direct);
  const tps = (msv: number) => (tok.tokens / msv) * 1000;

  console.log('');
  const rows: string[][] = [];
  for (const r of results) {
    const fMed = median(r.forks);
    const cMed = median(r.compactions.map((c) => c.ms));
    const c0 = r.compactions[0]!.result;
    rows.push([
      `${r.db} load (${r.load.blocks / Math.ceil(r.load.blocks / batch)}/batch)`,
      ms(r.load.ms),
      '',
      `${int((r.load.blocks / r.load.ms) * 1000)} blocks/s, ${int((r.load.tokens / r.load.ms) * 1000)} tokens/s`,
    ]);
    rows.push([`${r.db} fork (whole session)`, ms(fMed), r.forks.map(ms).join(' / '), `${int((r.load.blocks / fMed) * 1000)} blocks/s`]);
    rows.push([
      `${r.db} compact to 1/2 (extractive)`,
      ms(cMed),
      r.compactions.map((c) => ms(c.ms)).join(' / '),
      `${int(c0.previousTokens)} -> ${int(c0.newTokens)} tokens, ${int(c0.blocksCompacted)} blocks -> ${c0.summariesCreated} summaries`,
    ]);
  }
  rows.push(['tokenizer: Hangar wrapper', ms(wMed), tok.samples.wrapper.map(ms).join(' / '), `${int(tps(wMed))} tokens/s`]);
  rows.push(['tokenizer: gpt-tokenizer direct', ms(dMed), tok.samples.direct.map(ms).join(' / '), `${int(tps(dMed))} tokens/s`]);
  console.log(table(['operation', 'median ms', 'rounds ms', 'rate / result'], rows));
  const ratio = dMed / wMed;
  console.log(
    `tokenizer: ${int(tok.tokens)} tokens per pass (${(chars / tok.tokens).toFixed(2)} characters per token); warm-up pass wrapper ${ms(tok.warm.wrapper.ms)} ms, direct ${ms(tok.warm.direct.ms)} ms; ratio wrapper/direct tokens/s ${ratio.toFixed(3)}`,
  );
  for (const s of skipped) console.log(s);

  const parts = results.map((r) => {
    const fMed = median(r.forks);
    return `${r.db} fork ${ms(fMed)} ms (${int((r.load.blocks / fMed) * 1000)} blocks/s), compact ${ms(median(r.compactions.map((c) => c.ms)))} ms`;
  });
  if (skipped.length) parts.push('postgresql skipped');
  return `sessions: ${[`${int(n)} blocks`, ...parts].join('; ')}; tokenizer wrapper ${int(tps(wMed))} vs direct ${int(tps(dMed))} tokens/s, ratio ${ratio.toFixed(2)}`;
}
