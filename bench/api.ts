/**
 * `api`: authenticated `GET /v1/activity?limit=50` on an organization with 10,000 activity events, against two
 * baselines: a bare Fastify route that returns the same bytes, and the same page written by hand on Hangar's own
 * SQLite file (servers/handwritten.ts). All run in child processes started the same way; autocannon drives them from
 * this process over loopback, alternating targets (ABBA) after a warm-up.
 *
 * Options: --duration=S (measured seconds per target, default 8), --warmup=S (2), --rounds=N (2),
 * --connections=N (10), --events=N (10000), --profile (then CPU-profile Hangar under the same load).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { isDeepStrictEqual, parseArgs } from 'node:util';
import { startServer, type ServerChild } from './lib/child.js';
import { hit, summarize, table, type Sample, type Summary } from './lib/load.js';
import { analyzeProfile, formatProfile, type Bucket } from './lib/profile.js';
import type { Aim, BenchOutcome } from './lib/results.js';
import type { HangarInfo } from './servers/hangar.js';

export const description =
  'GET /v1/activity?limit=50 (API key, 10k events) vs the same page written by hand, and vs a bare Fastify route serving the same bytes';

const ROUTE = '/v1/activity';
const QUERY = '?limit=50';
/** Aims from issue 20: Hangar's throughput against each baseline's. */
const AIM_VS_HANDWRITTEN = 0.6;
const AIM_VS_BARE = 0.3;

/** How the profile splits Hangar's time; the first bucket matching a frame on the stack wins. */
const BUCKETS: Bucket[] = [
  { label: 'GC', match: (f) => f === '(garbage collector)' },
  {
    label: 'auth: API key (sha256, revocation mark, cache; lookup on a miss)',
    match: (f) =>
      /^(authenticate|byApiKey|lookUpKey|bySession|scopesFor) src\/domains\/identity\//.test(f) ||
      f.startsWith('revocationMark src/') ||
      f.startsWith('expandScopes src/'),
  },
  {
    label: 'response bytes: Content-Length, UTF-8 encode, writev',
    match: (f) => f.startsWith('writev') || f.startsWith('Socket._writev') || f.startsWith('byteLength node:buffer'),
  },
  { label: 'activity SQL: SQLite reads the page and writes its JSON', match: (f) => f === 'all' || f.startsWith('all src/platform/db/') },
  {
    label: 'activity: query text, Kysely executor, page text (join, envelope)',
    match: (f) => f.startsWith('listActivityJson src/') || f.startsWith('pageJson src/') || f.startsWith('sendJsonText src/'),
  },
  { label: 'querystring validation (zod)', match: (f) => f.includes(' zod/') || f.includes('fastify-type-provider-zod') },
  { label: 'request id, logger child, hooks', match: (f) => f.includes('src/platform/http/server.ts') || f.includes(' pino/') },
];

/** The page without its request id, which differs on every answer. */
function withoutRequestId(body: Uint8Array): unknown {
  const page = JSON.parse(Buffer.from(body).toString('utf8'));
  delete page.meta.requestId;
  return page;
}

export async function run(argv: string[]): Promise<BenchOutcome> {
  const { values } = parseArgs({
    args: argv,
    options: {
      duration: { type: 'string', default: '8' },
      warmup: { type: 'string', default: '2' },
      rounds: { type: 'string', default: '2' },
      connections: { type: 'string', default: '10' },
      events: { type: 'string', default: '10000' },
      profile: { type: 'boolean', default: false },
    },
    strict: true,
  });
  const duration = Number(values.duration);
  const warmup = Number(values.warmup);
  const rounds = Math.max(1, Number(values.rounds));
  const connections = Number(values.connections);
  const events = Number(values.events);
  const slice = duration / rounds;

  const children: ServerChild[] = [];
  try {
    process.stdout.write(`starting Hangar and seeding ${events} activity events... `);
    const hangar = await startServer<HangarInfo>('hangar', 'hangar.ts', { options: { activityEvents: events } });
    children.push(hangar);
    console.log(`listening on ${hangar.url} (setup ${hangar.info.seedMs.toFixed(0)} ms)`);
    const headers = { 'x-api-key': hangar.info.apiKey };

    // Capture the exact response once; the bare server serves these bytes.
    const res = await fetch(`${hangar.url}${ROUTE}${QUERY}`, { headers });
    const body = new Uint8Array(await res.arrayBuffer());
    const contentType = res.headers.get('content-type') ?? '';
    if (res.status !== 200) throw new Error(`Hangar answered ${res.status}: ${Buffer.from(body).toString('utf8').slice(0, 500)}`);
    const parsed = JSON.parse(Buffer.from(body).toString('utf8'));
    if (parsed.data?.events?.length !== 50 || parsed.meta?.hasMore !== true) {
      throw new Error(`unexpected Hangar page: ${parsed.data?.events?.length} events, hasMore ${parsed.meta?.hasMore}`);
    }

    const bare = await startServer('bare', 'bare.ts', { options: { path: ROUTE, body, contentType } });
    children.push(bare);
    const check = await fetch(`${bare.url}${ROUTE}${QUERY}`);
    const checkBody = new Uint8Array(await check.arrayBuffer());
    if (Buffer.compare(Buffer.from(checkBody), Buffer.from(body)) !== 0 || check.headers.get('content-type') !== contentType) {
      throw new Error('the bare server does not serve the captured bytes');
    }
    console.log(`bare Fastify on ${bare.url}; body ${body.length} bytes, ${contentType}`);

    const handwritten = await startServer('handwritten', 'handwritten.ts', {
      options: { path: ROUTE, dbFile: path.join(hangar.info.dataDir, 'hangar.db') },
    });
    children.push(handwritten);
    const own = await fetch(`${handwritten.url}${ROUTE}${QUERY}`, { headers });
    const ownBody = new Uint8Array(await own.arrayBuffer());
    if (own.status !== 200 || own.headers.get('content-type') !== contentType || ownBody.length !== body.length) {
      throw new Error(`the hand-written server answered ${own.status}, ${own.headers.get('content-type')}, ${ownBody.length} bytes`);
    }
    if (!isDeepStrictEqual(withoutRequestId(ownBody), withoutRequestId(body))) throw new Error("the hand-written page differs from Hangar's");
    console.log(`hand-written page on ${handwritten.url}, on Hangar's database file: the same page (request id aside)`);
    console.log(
      `load: autocannon, ${connections} connections, ${warmup}s warm-up each, then ${rounds} round(s) of ${slice}s per target (ABBA order)`,
    );

    const targets = [
      { name: 'bare', server: bare, headers: {} as Record<string, string> },
      { name: 'handwritten', server: handwritten, headers },
      { name: 'hangar', server: hangar, headers },
    ];
    for (const t of targets) await hit(t.server, `${ROUTE}${QUERY}`, { connections, duration: warmup, headers: t.headers });

    const samples = new Map<string, Sample[]>(targets.map((t) => [t.name, []]));
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? targets : [...targets].reverse();
      for (const t of order) {
        const s = await hit(t.server, `${ROUTE}${QUERY}`, { connections, duration: slice, headers: t.headers });
        samples.get(t.name)!.push(s);
        console.log(`  round ${r + 1} ${t.name.padEnd(11)} ${(s.requests / s.seconds).toFixed(0).padStart(6)} req/s`);
      }
    }

    const results = new Map<string, Summary>(targets.map((t) => [t.name, summarize(samples.get(t.name)!)]));
    const b = results.get('bare')!;
    const w = results.get('handwritten')!;
    const h = results.get('hangar')!;
    const ms = (x: number) => x.toFixed(2);
    const cpu = (x: number) => `${(x * 100).toFixed(0)}%`;
    console.log('');
    console.log(
      table(
        ['target', 'req/s', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'requests', 'non-2xx', 'errors', 'server CPU', 'CPU µs/req', 'loadgen CPU'],
        [...results].map(([name, s]) => [
          name,
          s.rps.toFixed(0),
          ms(s.p50),
          ms(s.p90),
          ms(s.p99),
          ms(s.max),
          s.requests,
          s.non2xx,
          s.errors,
          cpu(s.serverCpu),
          s.serverCpuPerRequest.toFixed(0),
          cpu(s.loadgenCpu),
        ]),
      ),
    );
    const vsHandwritten = h.rps / w.rps;
    const vsBare = h.rps / b.rps;
    const aims: Aim[] = [
      {
        name: 'hangar vs hand-written',
        figure: 'ratio_vs_handwritten',
        target: `>= ${AIM_VS_HANDWRITTEN}`,
        met: vsHandwritten >= AIM_VS_HANDWRITTEN,
      },
      { name: 'hangar vs bare', figure: 'ratio_vs_bare', target: `>= ${AIM_VS_BARE}`, met: vsBare >= AIM_VS_BARE },
    ];
    const verdict = (a: Aim) => (a.met ? 'aim met' : 'aim NOT met');
    console.log('');
    console.log(`ratio hangar/handwritten: ${vsHandwritten.toFixed(2)} (aim >= ${AIM_VS_HANDWRITTEN}: ${verdict(aims[0]!)})`);
    console.log(`ratio hangar/bare:        ${vsBare.toFixed(2)} (aim >= ${AIM_VS_BARE}: ${verdict(aims[1]!)})`);
    if ([b, w, h].some((s) => s.non2xx || s.errors)) throw new Error('some requests failed; the figures above are not valid');

    if (values.profile) {
      const dir = mkdtempSync(path.join(tmpdir(), 'hangar-bench-prof-'));
      const file = path.join(dir, 'hangar-api.cpuprofile');
      await hangar.startProfile(100);
      const s = await hit(hangar, `${ROUTE}${QUERY}`, { connections, duration: slice, headers });
      await hangar.stopProfile(file);
      console.log(`\nCPU profile of Hangar under the same load (${(s.requests / s.seconds).toFixed(0)} req/s while profiling): ${file}`);
      console.log(formatProfile(analyzeProfile(file, BUCKETS, 'Fastify + Node HTTP (parse, route, reply, headers)')));
    }

    const figures: Record<string, number> = { ratio_vs_handwritten: vsHandwritten, ratio_vs_bare: vsBare };
    for (const [name, s] of results) {
      Object.assign(figures, {
        [`${name}.req_s`]: s.rps,
        [`${name}.cpu_us_per_req`]: s.serverCpuPerRequest,
        [`${name}.p50_ms`]: s.p50,
        [`${name}.p99_ms`]: s.p99,
      });
    }
    const summary =
      `api: bare ${b.rps.toFixed(0)} req/s, handwritten ${w.rps.toFixed(0)} req/s, hangar ${h.rps.toFixed(0)} req/s ` +
      `(${h.serverCpuPerRequest.toFixed(0)} µs CPU/req); hangar/handwritten ${vsHandwritten.toFixed(2)} (${verdict(aims[0]!)}), ` +
      `hangar/bare ${vsBare.toFixed(2)} (${verdict(aims[1]!)})`;
    return { summary, figures, aims };
  } finally {
    for (const c of children) await c.stop();
  }
}
