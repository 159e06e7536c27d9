/**
 * `api`: authenticated `GET /v1/activity?limit=50` on an organization with 10,000 activity events, against a
 * bare Fastify route that returns the same bytes. Both run in child processes started the same way;
 * autocannon drives them from this process over loopback, alternating targets (ABBA) after a warm-up.
 *
 * Options: --duration=S (measured seconds per target, default 8), --warmup=S (2), --rounds=N (2),
 * --connections=N (10), --events=N (10000), --profile (then CPU-profile Hangar under the same load).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { startServer, type ServerChild } from './lib/child.js';
import { hit, summarize, table, type Sample } from './lib/load.js';
import { analyzeProfile, formatProfile, type Bucket } from './lib/profile.js';
import type { HangarInfo } from './servers/hangar.js';

export const description = 'GET /v1/activity?limit=50 (API key, 10k events) vs a bare Fastify route serving the same bytes';

const ROUTE = '/v1/activity';
const QUERY = '?limit=50';
const TARGET_RATIO = 0.4;

/** How the profile splits Hangar's time; the first bucket matching a frame on the stack wins. */
const BUCKETS: Bucket[] = [
  { label: 'GC', match: (f) => f === '(garbage collector)' },
  {
    label: 'auth: API key lookup (sha256, SQL, scopes)',
    match: (f) => /^(authenticate|byApiKey|bySession|scopesFor) src\/domains\/identity\//.test(f) || f.startsWith('expandScopes src/'),
  },
  { label: 'JSON.stringify of the page', match: (f) => f.startsWith('serialize fastify/') },
  {
    label: 'response bytes: Content-Length, UTF-8 encode, writev',
    match: (f) => f.startsWith('writev') || f.startsWith('Socket._writev') || f.startsWith('byteLength node:buffer'),
  },
  { label: 'activity SQL: SQLite + row materialization', match: (f) => f === 'all' || f.startsWith('all src/platform/db/') },
  { label: 'activity: Kysely build/compile + toEvent + cursor', match: (f) => f.startsWith('listActivity src/') },
  { label: 'querystring validation (zod)', match: (f) => f.includes(' zod/') || f.includes('fastify-type-provider-zod') },
  { label: 'request id, logger child, hooks', match: (f) => f.includes('src/platform/http/server.ts') || f.includes(' pino/') },
];

export async function run(argv: string[]): Promise<string> {
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
    console.log(
      `load: autocannon, ${connections} connections, ${warmup}s warm-up each, then ${rounds} round(s) of ${slice}s per target (ABBA order)`,
    );

    const targets = [
      { name: 'bare', server: bare, headers: {} as Record<string, string> },
      { name: 'hangar', server: hangar, headers },
    ];
    for (const t of targets) await hit(t.server, `${ROUTE}${QUERY}`, { connections, duration: warmup, headers: t.headers });

    const samples = new Map<string, Sample[]>(targets.map((t) => [t.name, []]));
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? targets : [...targets].reverse();
      for (const t of order) {
        const s = await hit(t.server, `${ROUTE}${QUERY}`, { connections, duration: slice, headers: t.headers });
        samples.get(t.name)!.push(s);
        console.log(`  round ${r + 1} ${t.name.padEnd(6)} ${(s.requests / s.seconds).toFixed(0).padStart(6)} req/s`);
      }
    }

    const b = summarize(samples.get('bare')!);
    const h = summarize(samples.get('hangar')!);
    const ms = (x: number) => x.toFixed(2);
    const cpu = (x: number) => `${(x * 100).toFixed(0)}%`;
    console.log('');
    console.log(
      table(
        ['target', 'req/s', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'requests', 'non-2xx', 'errors', 'server CPU', 'CPU µs/req', 'loadgen CPU'],
        [b, h].map((s, i) => [
          i === 0 ? 'bare' : 'hangar',
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
    const ratio = h.rps / b.rps;
    console.log(`\nratio hangar/bare: ${ratio.toFixed(2)} (target >= ${TARGET_RATIO}: ${ratio >= TARGET_RATIO ? 'met' : 'NOT met'})`);
    if (b.non2xx || h.non2xx || b.errors || h.errors) throw new Error('some requests failed; the figures above are not valid');

    if (values.profile) {
      const dir = mkdtempSync(path.join(tmpdir(), 'hangar-bench-prof-'));
      const file = path.join(dir, 'hangar-api.cpuprofile');
      await hangar.startProfile(100);
      const s = await hit(hangar, `${ROUTE}${QUERY}`, { connections, duration: slice, headers });
      await hangar.stopProfile(file);
      console.log(`\nCPU profile of Hangar under the same load (${(s.requests / s.seconds).toFixed(0)} req/s while profiling): ${file}`);
      console.log(formatProfile(analyzeProfile(file, BUCKETS, 'Fastify + Node HTTP (parse, route, reply, headers)')));
    }

    return `api: bare ${b.rps.toFixed(0)} req/s, hangar ${h.rps.toFixed(0)} req/s, ratio ${ratio.toFixed(2)}`;
  } finally {
    for (const c of children) await c.stop();
  }
}
