/**
 * `tools`: what server-side execution of a catalogue HTTP tool adds, in one run on one machine. The installed
 * `openweathermap_current` with its key stored through `POST /v1/tools/{slug}/credentials`, executed through
 * `POST /v1/tools/openweathermap_current/execute` `{ arguments: { city, units } }`, against the request Hangar sends
 * (`GET /data/2.5/weather?q=&units=&appid=`) sent straight to the same API.
 *   (1) latency: sequential calls with `fetch` (undici, keep-alive), direct and through Hangar alternating (ABBA) after
 *       a warm-up; median, p90 and p99 of each, and the added median (aim < 3 ms).
 *   (2) throughput: autocannon, --connections each, direct GET and Hangar POST in ABBA rounds after a warm-up; req/s
 *       of each and the ratio Hangar / direct.
 * The API is test/fakes/tool-api.ts (the loopback OpenWeatherMap fake) in a child process (this file, started by
 * lib/child.ts); Hangar is servers/hangar.ts in another (as in production: embedded SQLite, silent log, no response
 * validation), with a catalogue file pointing the shipped entry at the fake and HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS.
 * So the fake costs the same in both targets, and the client runs in neither server's process.
 *
 * Every answer is checked (direct: 200 and the city; Hangar: 200, `status: "completed"`, the city, the stored key);
 * anything else fails the benchmark.
 *
 * Options: --samples N (sequential calls per target, default 500), --warmup-calls N (50), --duration S (measured
 * seconds of load per target, split over the rounds, default 6), --rounds N (2), --warmup S (load warm-up per target,
 * 1), --connections N (8), --profile (then CPU-profile Hangar under the same load).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { SERVERS_DIR, serveChild, startServer, type ServerChild } from './lib/child.js';
import { hit, summarize, table, type LoadOptions, type Sample } from './lib/load.js';
import { analyzeProfile, formatProfile, type Bucket } from './lib/profile.js';
import type { HangarInfo } from './servers/hangar.js';

export const description =
  'POST /v1/tools/{slug}/execute (installed HTTP tool, stored key) vs the same request straight to the API: added latency, throughput ratio';

/** Aim from the issue: added median latency, ms. */
const AIM_MS = 3;
const SLUG = 'openweathermap_current';
const API_KEY = 'owm-bench-key-5c2e';
const CITY = 'Paris';
const UNITS = 'metric';
const SELF = fileURLToPath(import.meta.url);

// ---- the fake API's child process ----------------------------------------------------------------

/** Runs in the child: the loopback OpenWeatherMap fake, with its request log emptied often (it would grow under load). */
function fakeMain(): void {
  let stop: (() => Promise<void>) | undefined;
  serveChild(
    async () => {
      const { startToolApi } = await import('../test/fakes/tool-api.js');
      const api = await startToolApi({ apiKeys: [API_KEY] });
      const timer = setInterval(() => {
        api.requests.length = 0;
      }, 50);
      stop = async () => {
        clearInterval(timer);
        await api.close();
      };
      return { port: Number(new URL(api.url).port) };
    },
    async () => {
      await stop?.();
    },
  );
}

// ---- helpers ---------------------------------------------------------------------------------------

/** The shipped catalogue's entry with its host replaced by the fake's: the operator's catalogue file. */
function writeCatalog(dir: string, apiUrl: string): string {
  const shipped = JSON.parse(readFileSync(new URL('../src/domains/tools/catalog.json', import.meta.url), 'utf8')) as {
    tools: { slug: string; execution: { url?: string } }[];
  };
  const entry = shipped.tools.find((t) => t.slug === SLUG);
  if (!entry?.execution.url) throw new Error(`the shipped catalogue has no HTTP tool ${SLUG}`);
  const tool = { ...entry, execution: { ...entry.execution, url: entry.execution.url.replace(/^https:\/\/[^/]+/, apiUrl) } };
  const file = path.join(dir, 'catalog.json');
  writeFileSync(file, JSON.stringify({ tools: [tool] }));
  return file;
}

function fail(what: string, detail: string): never {
  throw new Error(`${what}: ${detail.slice(0, 500)}`);
}

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

const positive = (name: string, v: string | undefined, min = 1) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < min) throw new Error(`--${name} must be a number >= ${min}`);
  return n;
};

/** How the profile splits Hangar's time; the first bucket matching a frame on the stack wins. */
const BUCKETS: Bucket[] = [
  { label: 'GC', match: (f) => f === '(garbage collector)' },
  {
    label: 'auth: API key lookup (sha256, SQL, scopes)',
    match: (f) => /^(authenticate|byApiKey|bySession|scopesFor) src\/domains\/identity\//.test(f) || f.startsWith('expandScopes src/'),
  },
  { label: 'credentials: lookup + decrypt', match: (f) => f.startsWith('resolveCredentials src/domains/tools/') },
  { label: 'outbound request: egress guard + undici', match: (f) => f.includes('src/platform/http/egress.ts') || f.includes(' undici/') },
  { label: 'activity event', match: (f) => f.startsWith('recordActivity src/domains/activity/') },
  {
    label: 'tool lookup, install check, execution row (SQLite + Kysely)',
    match: (f) =>
      f === 'all' ||
      f === 'run' ||
      f === 'get' ||
      f.includes(' kysely/') ||
      f.includes('src/platform/db/') ||
      f.includes('src/domains/tools/repo.ts'),
  },
  { label: 'argument validation, request building, output', match: (f) => f.includes('src/domains/tools/') },
  { label: 'body validation (zod)', match: (f) => f.includes(' zod/') || f.includes('fastify-type-provider-zod') },
];

// ---- the benchmark ---------------------------------------------------------------------------------

export async function run(argv: string[]): Promise<string> {
  const { values } = parseArgs({
    args: argv,
    options: {
      samples: { type: 'string', default: '500' },
      'warmup-calls': { type: 'string', default: '50' },
      duration: { type: 'string', default: '6' },
      rounds: { type: 'string', default: '2' },
      warmup: { type: 'string', default: '1' },
      connections: { type: 'string', default: '8' },
      profile: { type: 'boolean', default: false },
    },
    strict: true,
  });
  const samples = Math.round(positive('samples', values.samples));
  const warmupCalls = Math.round(positive('warmup-calls', values['warmup-calls'], 0));
  const duration = positive('duration', values.duration, 0.5);
  const rounds = Math.round(positive('rounds', values.rounds));
  const warmup = positive('warmup', values.warmup, 0);
  const connections = Math.round(positive('connections', values.connections));
  const slice = duration / rounds;

  const tmp = mkdtempSync(path.join(tmpdir(), 'hangar-bench-tools-'));
  const children: ServerChild[] = [];
  let hangarDataDir: string | undefined;
  // lib/child.ts kills the children and exits at once on SIGINT/SIGTERM. The temp dirs go then, synchronously: Hangar's
  // too, since an interrupted Hangar child was seen to exit without running its teardown.
  const onExit = () => {
    rmSync(tmp, { recursive: true, force: true });
    if (hangarDataDir) rmSync(hangarDataDir, { recursive: true, force: true });
  };
  process.on('exit', onExit);
  try {
    process.stdout.write('starting the fake OpenWeatherMap API and Hangar (child processes)... ');
    const fake = await startServer('tool-api', path.relative(SERVERS_DIR, SELF));
    children.push(fake);
    const catalogFile = writeCatalog(tmp, fake.url);
    const hangar = await startServer<HangarInfo>('hangar', 'hangar.ts', {
      options: { env: { HANGAR_SERVICES: 'tools', HANGAR_TOOLS_CATALOG_FILE: catalogFile, HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: 'true' } },
    });
    children.push(hangar);
    hangarDataDir = hangar.info.dataDir;
    console.log(`fake on ${fake.url}, Hangar on ${hangar.url}`);

    // Install the tool and store the key through the product's routes, as a user would.
    const auth = { 'x-api-key': hangar.info.apiKey, 'content-type': 'application/json' };
    for (const [route, body] of [
      [`/v1/tools/${SLUG}/install`, {}],
      [`/v1/tools/${SLUG}/credentials`, { apiKey: API_KEY }],
    ] as const) {
      const res = await fetch(`${hangar.url}${route}`, { method: 'POST', headers: auth, body: JSON.stringify(body) });
      const text = await res.text();
      if (res.status < 200 || res.status > 299) fail(`POST ${route} answered ${res.status}`, text);
    }

    const directPath = `/data/2.5/weather?q=${CITY}&units=${UNITS}&appid=${API_KEY}`;
    const directUrl = `${fake.url}${directPath}`;
    const viaPath = `/v1/tools/${SLUG}/execute`;
    const viaUrl = `${hangar.url}${viaPath}`;
    const viaBody = JSON.stringify({ arguments: { city: CITY, units: UNITS } });

    /** One call each way; the time covers sending to the whole body read, the checks come after. */
    const direct = async (): Promise<number> => {
      const t0 = performance.now();
      const res = await fetch(directUrl);
      const text = await res.text();
      const ms = performance.now() - t0;
      if (res.status !== 200 || (JSON.parse(text) as { name?: string }).name !== CITY) fail(`direct GET answered ${res.status}`, text);
      return ms;
    };
    const via = async (): Promise<number> => {
      const t0 = performance.now();
      const res = await fetch(viaUrl, { method: 'POST', headers: auth, body: viaBody });
      const text = await res.text();
      const ms = performance.now() - t0;
      const d = res.status === 200 ? (JSON.parse(text) as { data?: any }).data : undefined;
      if (d?.status !== 'completed' || d.output?.name !== CITY || d.httpStatus !== 200 || d.credentialSources?.apiKey !== 'stored')
        fail(`POST ${viaPath} answered ${res.status}`, text);
      return ms;
    };

    // ---- (1) latency ----
    console.log(
      `(1) latency: ${samples} sequential calls per target after ${warmupCalls} warm-ups each, direct and through Hangar alternating (ABBA); fetch, keep-alive`,
    );
    for (let i = 0; i < warmupCalls; i++) {
      await direct();
      await via();
    }
    const lat = { direct: [] as number[], via: [] as number[] };
    const hangarCpu0 = await hangar.cpuMicros();
    for (let i = 0; i < samples; i++) {
      if (i % 2 === 0) {
        lat.direct.push(await direct());
        lat.via.push(await via());
      } else {
        lat.via.push(await via());
        lat.direct.push(await direct());
      }
    }
    const hangarCpuPerCall = ((await hangar.cpuMicros()) - hangarCpu0) / samples;
    const f = (x: number) => x.toFixed(2);
    const added = percentile(lat.via, 50) - percentile(lat.direct, 50);
    const aimMet = added < AIM_MS;
    console.log('');
    console.log(
      table(
        ['(1) latency', 'n', 'median ms', 'p90 ms', 'p99 ms', 'added median ms', 'Hangar CPU µs/call', 'aim (added median)', 'result'],
        [
          [
            'direct GET /data/2.5/weather (fake API)',
            lat.direct.length,
            f(percentile(lat.direct, 50)),
            f(percentile(lat.direct, 90)),
            f(percentile(lat.direct, 99)),
            '',
            '',
            '',
            '',
          ],
          [
            `POST ${viaPath}`,
            lat.via.length,
            f(percentile(lat.via, 50)),
            f(percentile(lat.via, 90)),
            f(percentile(lat.via, 99)),
            `${added >= 0 ? '+' : '-'}${f(Math.abs(added))}`,
            hangarCpuPerCall.toFixed(0),
            `< ${AIM_MS} ms`,
            aimMet ? 'aim met' : 'aim NOT met',
          ],
        ],
      ),
    );

    // ---- (2) throughput ----
    console.log(
      `\n(2) throughput: autocannon, ${connections} connections, ${warmup}s warm-up each, then ${rounds} round(s) of ${slice}s per target (ABBA order)`,
    );
    interface Target {
      name: string;
      server: ServerChild;
      path: string;
      load: Omit<LoadOptions, 'connections' | 'duration'>;
    }
    const targets: Target[] = [
      { name: 'direct', server: fake, path: directPath, load: { verifyBody: (b) => b.includes(`"name":"${CITY}"`) } },
      {
        name: 'via Hangar',
        server: hangar,
        path: viaPath,
        load: {
          method: 'POST',
          body: viaBody,
          headers: auth,
          verifyBody: (b) => b.includes('"status":"completed"') && b.includes(`"name":"${CITY}"`),
        },
      },
    ];
    /** One load step, with the CPU time both children used meanwhile (µs). */
    const step = async (t: Target, seconds: number) => {
      const c0 = [await fake.cpuMicros(), await hangar.cpuMicros()];
      const s = await hit(t.server, t.path, { connections, duration: seconds, ...t.load });
      const fakeUs = (await fake.cpuMicros()) - c0[0]!;
      const hangarUs = (await hangar.cpuMicros()) - c0[1]!;
      return { s, fakeUs, hangarUs };
    };
    for (const t of targets) await step(t, warmup);
    const got = new Map(targets.map((t) => [t.name, { samples: [] as Sample[], fakeUs: 0, hangarUs: 0 }]));
    for (let r = 0; r < rounds; r++) {
      for (const t of r % 2 === 0 ? targets : [...targets].reverse()) {
        const { s, fakeUs, hangarUs } = await step(t, slice);
        const g = got.get(t.name)!;
        g.samples.push(s);
        g.fakeUs += fakeUs;
        g.hangarUs += hangarUs;
        console.log(`  round ${r + 1} ${t.name.padEnd(10)} ${(s.requests / s.seconds).toFixed(0).padStart(6)} req/s`);
      }
    }
    const rows = targets.map((t) => {
      const g = got.get(t.name)!;
      const sum = summarize(g.samples);
      const seconds = g.samples.reduce((a, s) => a + s.seconds, 0);
      return {
        name: t.name,
        sum,
        fakeCpu: g.fakeUs / 1e6 / seconds,
        hangarCpu: g.hangarUs / 1e6 / seconds,
        hangarUsPerReq: g.hangarUs / Math.max(1, sum.requests),
      };
    });
    const cpu = (x: number) => `${(x * 100).toFixed(0)}%`;
    console.log('');
    console.log(
      table(
        [
          '(2) throughput',
          'req/s',
          'p50 ms',
          'p90 ms',
          'p99 ms',
          'requests',
          'non-2xx',
          'errors',
          'mismatches',
          'fake CPU',
          'Hangar CPU',
          'Hangar CPU µs/req',
          'loadgen CPU',
        ],
        rows.map((r) => [
          r.name === 'direct' ? 'direct GET (fake API)' : `via Hangar: POST ${viaPath}`,
          r.sum.rps.toFixed(0),
          f(r.sum.p50),
          f(r.sum.p90),
          f(r.sum.p99),
          r.sum.requests,
          r.sum.non2xx,
          r.sum.errors,
          r.sum.mismatches,
          cpu(r.fakeCpu),
          cpu(r.hangarCpu),
          r.name === 'direct' ? '' : r.hangarUsPerReq.toFixed(0),
          cpu(r.sum.loadgenCpu),
        ]),
      ),
    );
    const [d, v] = rows as [(typeof rows)[0], (typeof rows)[0]];
    const ratio = v.sum.rps / d.sum.rps;
    console.log(`\nratio via Hangar / direct: ${ratio.toFixed(2)}`);
    for (const r of rows) {
      if (r.sum.non2xx || r.sum.errors || r.sum.mismatches)
        throw new Error(
          `${r.name}: ${r.sum.non2xx} non-2xx, ${r.sum.errors} errors, ${r.sum.mismatches} wrong answers; the figures above are not valid`,
        );
    }

    if (values.profile) {
      const dir = mkdtempSync(path.join(tmpdir(), 'hangar-bench-prof-'));
      const file = path.join(dir, 'hangar-tools.cpuprofile');
      await hangar.startProfile(100);
      const { s } = await step(targets[1]!, slice);
      await hangar.stopProfile(file);
      if (s.non2xx || s.errors || s.mismatches) throw new Error('some requests failed while profiling');
      console.log(`\nCPU profile of Hangar under the same load (${(s.requests / s.seconds).toFixed(0)} req/s while profiling): ${file}`);
      console.log(formatProfile(analyzeProfile(file, BUCKETS, 'other: Fastify, Node HTTP (parse, route, reply, socket writes), microtasks')));
    }

    return (
      `tools: added median ${added >= 0 ? '+' : '-'}${f(Math.abs(added))} ms (direct ${f(percentile(lat.direct, 50))}, via Hangar ${f(percentile(lat.via, 50))}; ` +
      `aim < ${AIM_MS} ms ${aimMet ? 'met' : 'NOT met'}); throughput direct ${d.sum.rps.toFixed(0)} req/s, via Hangar ${v.sum.rps.toFixed(0)} req/s, ratio ${ratio.toFixed(2)}`
    );
  } finally {
    for (const c of children.reverse()) await c.stop();
    rmSync(tmp, { recursive: true, force: true });
    process.off('exit', onExit);
  }
}

// lib/child.ts starts this file as a child (`node --import tsx bench/tools.ts`, with an IPC channel): the fake API.
if (process.argv[1] && path.resolve(process.argv[1]) === SELF) {
  if (process.send) fakeMain();
  else {
    console.error('bench/tools.ts is the fake API child of `npm run bench -- tools`; run that instead');
    process.exit(2);
  }
}
