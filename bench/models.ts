/**
 * `models`: the latency the model proxy adds, in one run on one machine.
 *   (1) JSON: POST /v1/model-proxy `{ model, options: { messages } }` (X-API-Key) against the same request sent
 *       straight to the provider's POST /v1/chat/completions;
 *   (2) stream: POST /v1/model-proxy/stream (NDJSON) against /v1/chat/completions with `stream: true` (SSE): total
 *       time, time to the first byte, and time to the first text (proxy: the first `text-delta` line; direct: the
 *       first SSE event with non-empty `delta.content`).
 * The provider is test/fakes/openai.ts, run in a child process (this file, started by lib/child.ts), answering every
 * request with the same fixed response (--chunks text chunks when streamed, their concatenation otherwise), so its
 * CPU does not count against Hangar and direct and proxied calls reach it the same way. Hangar runs in this process
 * (lib/in-process.ts) with HANGAR_OPENAI_BASE_URL pointing at the fake, and is reached over loopback; the proxy calls
 * the fake through its passthrough (ADR 0036), or through the AI SDK with --sdk. Both targets are called with `fetch`
 * (undici, keep-alive), one call at a time, ABBA after a warm-up. Aims: added median < 1 ms for JSON and to the first
 * text-delta line; proxied CPU per call <= 1.5x the direct call's, for JSON and for the stream.
 *
 * Options: --iterations N (calls per target and mode, default 300), --warmup N (30), --chunks N (20), --chunk-delay MS
 * (between streamed chunks; default 0, one burst), --sdk (proxy through the AI SDK path instead of the passthrough,
 * to compare), --profile (then CPU-profile this process over direct and proxied calls and print where the added CPU
 * time goes).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { SERVERS_DIR, serveChild, startProfiler, startServer, type ServerChild } from './lib/child.js';
import { startInProcessHangar, stopInProcessHangar, type InProcessHangar } from './lib/in-process.js';
import { table } from './lib/load.js';
import { analyzeProfile, type Bucket, type ProfileReport } from './lib/profile.js';
import type { Aim, BenchOutcome } from './lib/results.js';

export const description = 'model proxy (JSON and NDJSON stream) vs the same call straight to the OpenAI-compatible provider: added latency and CPU';

/** Aims from the issue: added median latency (JSON; stream to the first text-delta line), ms. */
const AIM_ADDED_MS = 1;
/** Aims from the issue: proxied CPU per call over the direct call's (JSON; stream). */
const AIM_CPU_RATIO = 1.5;
const MODEL = 'bench-model';
const PROMPT = 'Say something short.';
const SELF = fileURLToPath(import.meta.url);

/** The fixed answer: `chunks` text chunks (streamed one per SSE event), their concatenation when not streamed. */
const answerChunks = (chunks: number) => Array.from({ length: chunks }, (_, i) => `tok${String(i).padStart(2, '0')} `);

// ---- the fake provider's child process ---------------------------------------------------------

/**
 * Runs in the child: FakeOpenAI with the same scripted response queued for every request. The fake answers "ok"
 * when its queue is empty, so a timer keeps it topped up (and empties `requests`, which would otherwise grow).
 */
function fakeMain(): void {
  let stop: (() => Promise<void>) | undefined;
  serveChild(
    async (opts: { chunks: number; chunkDelayMs: number }) => {
      const { FakeOpenAI } = await import('../test/fakes/openai.js');
      const fake = await new FakeOpenAI().start();
      const response = {
        text: answerChunks(opts.chunks),
        usage: { prompt: 12, completion: opts.chunks },
        ...(opts.chunkDelayMs > 0 ? { chunkDelayMs: opts.chunkDelayMs } : {}),
      };
      const LOW = 500;
      const HIGH = 1000;
      // `requests` is recorded before the queue is read, so `queued` never exceeds what is really queued.
      let queued = 0;
      const topUp = () => {
        queued -= fake.requests.length;
        fake.requests.length = 0;
        if (queued < LOW) {
          fake.script(...Array.from({ length: HIGH - queued }, () => response));
          queued = HIGH;
        }
      };
      topUp();
      const timer = setInterval(topUp, 50);
      stop = async () => {
        clearInterval(timer);
        await fake.stop();
      };
      return { port: Number(new URL(fake.url).port) };
    },
    async () => {
      await stop?.();
    },
  );
}

// ---- the calls -----------------------------------------------------------------------------------

interface Targets {
  /** The fake's base URL, ending in /v1. */
  fakeUrl: string;
  hangarUrl: string;
  apiKey: string;
  expected: string;
  chunks: number;
}

interface StreamTiming {
  total: number;
  firstByte: number;
  firstText: number;
}

const directBody = (stream: boolean) =>
  JSON.stringify({
    model: MODEL,
    messages: [{ role: 'user', content: PROMPT }],
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  });
const proxyBody = JSON.stringify({ model: MODEL, options: { messages: [{ role: 'user', content: PROMPT }] } });

function fail(what: string, detail: string): never {
  throw new Error(`${what}: ${detail.slice(0, 500)}`);
}

function makeCalls(t: Targets) {
  const directHeaders = { 'content-type': 'application/json', authorization: 'Bearer sk-bench' };
  const proxyHeaders = { 'content-type': 'application/json', 'x-api-key': t.apiKey };
  const jsonDirect = directBody(false);
  const streamDirect = directBody(true);

  /** Reads a streamed body, timing its first byte and first text; `parse` returns the text of one `sep`-ended record, or ''. */
  async function readStream(res: Response, t0: number, sep: string, parse: (record: string) => string): Promise<StreamTiming & { text: string }> {
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let firstByte = NaN;
    let firstText = NaN;
    let buf = '';
    let text = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const now = performance.now();
      if (Number.isNaN(firstByte) && value.length > 0) firstByte = now - t0;
      buf += decoder.decode(value, { stream: true });
      for (let i = buf.indexOf(sep); i >= 0; i = buf.indexOf(sep)) {
        const record = buf.slice(0, i);
        buf = buf.slice(i + sep.length);
        const piece = record ? parse(record) : '';
        if (piece) {
          if (Number.isNaN(firstText)) firstText = now - t0;
          text += piece;
        }
      }
    }
    return { total: performance.now() - t0, firstByte, firstText, text };
  }

  return {
    async directJson(): Promise<number> {
      const t0 = performance.now();
      const res = await fetch(`${t.fakeUrl}/chat/completions`, { method: 'POST', headers: directHeaders, body: jsonDirect });
      const body = (await res.json()) as any;
      const ms = performance.now() - t0;
      if (res.status !== 200 || body.choices?.[0]?.message?.content !== t.expected) fail(`direct JSON answered ${res.status}`, JSON.stringify(body));
      return ms;
    },

    async proxyJson(): Promise<number> {
      const t0 = performance.now();
      const res = await fetch(`${t.hangarUrl}/v1/model-proxy`, { method: 'POST', headers: proxyHeaders, body: proxyBody });
      const body = (await res.json()) as any;
      const ms = performance.now() - t0;
      if (res.status !== 200 || body.data?.text !== t.expected) fail(`POST /v1/model-proxy answered ${res.status}`, JSON.stringify(body));
      return ms;
    },

    async directStream(): Promise<StreamTiming> {
      const t0 = performance.now();
      const res = await fetch(`${t.fakeUrl}/chat/completions`, { method: 'POST', headers: directHeaders, body: streamDirect });
      if (res.status !== 200) fail(`direct stream answered ${res.status}`, await res.text());
      let done = false;
      const r = await readStream(res, t0, '\n\n', (record) => {
        if (!record.startsWith('data: ')) return '';
        const data = record.slice(6);
        if (data === '[DONE]') {
          done = true;
          return '';
        }
        return (JSON.parse(data).choices?.[0]?.delta?.content as string | undefined) ?? '';
      });
      if (!done || r.text !== t.expected) fail('direct stream', `done ${done}, text ${JSON.stringify(r.text)}`);
      return r;
    },

    async proxyStream(): Promise<StreamTiming> {
      const t0 = performance.now();
      const res = await fetch(`${t.hangarUrl}/v1/model-proxy/stream`, { method: 'POST', headers: proxyHeaders, body: proxyBody });
      if (res.status !== 200) fail(`POST /v1/model-proxy/stream answered ${res.status}`, await res.text());
      const types: string[] = [];
      let deltas = 0;
      const r = await readStream(res, t0, '\n', (record) => {
        const line = JSON.parse(record);
        types.push(line.type);
        if (line.type === 'error') fail('POST /v1/model-proxy/stream: error line', record);
        if (line.type !== 'text-delta') return '';
        deltas++;
        return line.text as string;
      });
      if (types[0] !== 'start' || types.at(-1) !== 'finish' || r.text !== t.expected) {
        fail('POST /v1/model-proxy/stream', `lines ${types.join(',') || '(none: empty body)'}, text ${JSON.stringify(r.text)}`);
      }
      if (deltas !== t.chunks) fail('POST /v1/model-proxy/stream', `${deltas} text-delta lines for ${t.chunks} chunks`);
      return r;
    },
  };
}

// ---- statistics ------------------------------------------------------------------------------

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}
const median = (xs: number[]) => percentile(xs, 50);
const p99 = (xs: number[]) => percentile(xs, 99);

/** Runs `fn`, and adds the CPU time this process spent meanwhile (client, and Hangar when proxied) to `cpu[0]`. */
async function withCpu<T>(cpu: number[], fn: () => Promise<T>): Promise<T> {
  const c0 = process.cpuUsage();
  const r = await fn();
  const c = process.cpuUsage(c0);
  cpu[0]! += c.user + c.system;
  return r;
}

// ---- profiling -------------------------------------------------------------------------------

/** How the profile splits this process's time; the first bucket (in this order) matching a frame on a sample's stack wins. */
const BUCKETS: Bucket[] = [
  { label: 'GC', match: (f) => f === '(garbage collector)' },
  {
    label: 'auth: API key lookup (identity: sha256, SQL, scopes)',
    match: (f) => f.includes(' src/domains/identity/') || f.startsWith('expandScopes src/'),
  },
  {
    label: 'credits check and metering (requireCredits; recordModelUsage: rows, usage event, settle)',
    match: (f) => f.startsWith('recordModelUsage src/domains/models/') || f.includes(' src/domains/billing/'),
  },
  {
    label: 'SQLite + Kysely (async halves of the two above)',
    match: (f) =>
      f === 'all' || f === 'run' || f === 'get' || f.includes(' kysely/') || f.includes(' better-sqlite3/') || f.includes('src/platform/db/'),
  },
  { label: 'AI SDK (generateText/streamText, provider; with --sdk)', match: (f) => /^\S* (ai|@ai-sdk\/[\w-]+)\//.test(f) },
  { label: 'passthrough: undici, the request to the provider', match: (f) => f.includes(' undici/') },
  {
    label: 'passthrough: reading the answer (JSON, SSE) and making NDJSON',
    match: (f) => / src\/domains\/models\/(passthrough|openai-wire)\.ts/.test(f),
  },
  { label: 'body validation (zod)', match: (f) => f.includes(' zod/') || f.includes(' fastify-type-provider-zod/') },
  { label: 'model proxy route + service (NDJSON writes)', match: (f) => f.includes('src/domains/models/') },
  {
    label: 'Fastify + Hangar HTTP plumbing (route, hooks, reply)',
    match: (f) =>
      / (fastify|find-my-way|avvio|light-my-request|pino|@fastify\/[\w-]+|fast-json-stringify)\//.test(f) || f.includes('src/platform/http/'),
  },
  { label: 'benchmark client code', match: (f) => f.includes('bench/models.ts') },
  { label: 'web streams (fetch bodies; with --sdk, the AI SDK stream pipeline)', match: (f) => f.includes(' node:internal/webstreams') },
  { label: "Node's undici (fetch: the client's; with --sdk, the AI SDK's)", match: (f) => f.includes(' node:internal/deps') },
  {
    label: 'Node HTTP server + sockets',
    match: (f) =>
      / node:(_http|net|internal\/(stream_base_commons|streams|http))/.test(f) || f.startsWith('writev') || f.startsWith('writeUtf8String'),
  },
];
const OTHER = 'other (timers, microtasks, native, idle bookkeeping)';

/** CPU-profiles this process (V8 sampler every 100 µs, as lib/child.ts does for children) while `fn` runs. */
async function profile(file: string, fn: () => Promise<void>): Promise<string> {
  const stop = await startProfiler(100);
  try {
    await fn();
  } finally {
    await stop(file);
  }
  return file;
}

// ---- the benchmark ---------------------------------------------------------------------------

interface Row {
  label: string;
  samples: number[];
  cpuUs?: number;
  /** The direct row this proxied row is compared with. */
  baseline?: Row;
}

export async function run(argv: string[]): Promise<BenchOutcome> {
  const { values } = parseArgs({
    args: argv,
    options: {
      iterations: { type: 'string', default: '300' },
      warmup: { type: 'string', default: '30' },
      chunks: { type: 'string', default: '20' },
      'chunk-delay': { type: 'string', default: '0' },
      sdk: { type: 'boolean', default: false },
      profile: { type: 'boolean', default: false },
    },
    strict: true,
  });
  const iterations = Number(values.iterations);
  const warmup = Number(values.warmup);
  const chunks = Number(values.chunks);
  const chunkDelayMs = Number(values['chunk-delay']);
  if (!(iterations > 0) || !(chunks > 0)) throw new Error('--iterations and --chunks must be positive numbers');
  if (!(warmup >= 0) || !(chunkDelayMs >= 0)) throw new Error('--warmup and --chunk-delay must be numbers >= 0');

  let fake: ServerChild | undefined;
  let hangar: InProcessHangar | undefined;
  const cleanup = async () => {
    if (hangar) await stopInProcessHangar(hangar).catch((err) => console.error(`models: Hangar cleanup failed: ${(err as Error).message}`));
    hangar = undefined;
    if (fake) await fake.stop().catch(() => undefined);
    fake = undefined;
  };
  // lib/child.ts exits at once on SIGINT when its handler runs first; the data dir goes then, synchronously.
  const onExit = () => {
    if (hangar) rmSync(hangar.dataDir, { recursive: true, force: true });
  };
  const onSignal = () => {
    void cleanup().finally(() => process.exit(130));
  };
  process.on('exit', onExit);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  try {
    process.stdout.write('starting the fake OpenAI-compatible provider (child process) and Hangar (in process)... ');
    fake = await startServer('fake-openai', path.relative(SERVERS_DIR, SELF), { options: { chunks, chunkDelayMs } });
    const fakeUrl = `${fake.url}/v1`;
    hangar = await startInProcessHangar('models', {
      HANGAR_OPENAI_BASE_URL: fakeUrl,
      HANGAR_OPENAI_API_KEY: 'sk-bench',
      HANGAR_OPENAI_MODELS: MODEL,
    });
    if (values.sdk) {
      // The gateway without its passthrough: every proxy call goes through the AI SDK, as for other providers.
      const { modelGateway } = await import('../src/domains/models/index.js');
      modelGateway(hangar.deps).passthrough = null;
    }
    console.log(
      `fake on ${fakeUrl}, Hangar on ${hangar.url}; the proxy calls it ${values.sdk ? 'through the AI SDK (--sdk)' : 'through its passthrough'}`,
    );
    const expected = answerChunks(chunks).join('');
    const calls = makeCalls({ fakeUrl, hangarUrl: hangar.url, apiKey: hangar.apiKey, expected, chunks });
    console.log(
      `${iterations} sequential calls per target and mode after ${warmup} warm-ups each, direct and proxied alternating (ABBA); ` +
        `answer: ${chunks} chunks, ${expected.length} characters of text${chunkDelayMs > 0 ? `, streamed ${chunkDelayMs} ms apart` : ', streamed in one burst'}`,
    );

    // (1) JSON.
    const json = { direct: [] as number[], proxy: [] as number[], directCpu: [0], proxyCpu: [0] };
    for (let i = 0; i < warmup; i++) {
      await calls.directJson();
      await calls.proxyJson();
    }
    for (let i = 0; i < iterations; i++) {
      const steps = [
        async () => json.direct.push(await withCpu(json.directCpu, calls.directJson)),
        async () => json.proxy.push(await withCpu(json.proxyCpu, calls.proxyJson)),
      ];
      for (const step of i % 2 === 0 ? steps : steps.reverse()) await step();
    }

    // (2) Streams.
    const stream = { direct: [] as StreamTiming[], proxy: [] as StreamTiming[], directCpu: [0], proxyCpu: [0] };
    for (let i = 0; i < warmup; i++) {
      await calls.directStream();
      await calls.proxyStream();
    }
    for (let i = 0; i < iterations; i++) {
      const steps = [
        async () => stream.direct.push(await withCpu(stream.directCpu, calls.directStream)),
        async () => stream.proxy.push(await withCpu(stream.proxyCpu, calls.proxyStream)),
      ];
      for (const step of i % 2 === 0 ? steps : steps.reverse()) await step();
    }

    const jd: Row = { label: '(1) direct POST /v1/chat/completions', samples: json.direct, cpuUs: json.directCpu[0]! / iterations };
    const jp: Row = { label: '(1) POST /v1/model-proxy', samples: json.proxy, cpuUs: json.proxyCpu[0]! / iterations, baseline: jd };
    const sd: Row = { label: '(2) direct stream: total', samples: stream.direct.map((s) => s.total), cpuUs: stream.directCpu[0]! / iterations };
    const sp: Row = {
      label: '(2) POST /v1/model-proxy/stream: total',
      samples: stream.proxy.map((s) => s.total),
      cpuUs: stream.proxyCpu[0]! / iterations,
      baseline: sd,
    };
    const bd: Row = { label: '    direct: first byte (SSE data)', samples: stream.direct.map((s) => s.firstByte) };
    const bp: Row = { label: '    proxy: first byte (`start` line)', samples: stream.proxy.map((s) => s.firstByte), baseline: bd };
    const td: Row = { label: '    direct: first content chunk', samples: stream.direct.map((s) => s.firstText) };
    const tp: Row = { label: '    proxy: first text-delta line', samples: stream.proxy.map((s) => s.firstText), baseline: td };
    const rows = [jd, jp, sd, sp, bd, bp, td, tp];

    const f = (x: number) => x.toFixed(2);
    const signed = (x: number) => `${x >= 0 ? '+' : '-'}${f(Math.abs(x))}`;
    const added = (r: Row) => median(r.samples) - median(r.baseline!.samples);
    const addedP99 = (r: Row) => p99(r.samples) - p99(r.baseline!.samples);
    const cpuRatio = (r: Row) => r.cpuUs! / r.baseline!.cpuUs!;
    // The rows the latency aim is about: JSON, and the stream to its first text-delta line.
    const latencyAimed = new Set([jp, tp]);
    console.log('');
    console.log(
      table(
        ['target', 'n', 'median ms', 'p99 ms', 'added median ms', 'added p99 ms', 'CPU µs/call', 'added CPU µs', 'CPU ratio', 'aims', 'result'],
        rows.map((r) => {
          const cpuAimed = r.baseline?.cpuUs !== undefined && r.cpuUs !== undefined;
          const aims = [latencyAimed.has(r) ? `added < ${AIM_ADDED_MS} ms` : '', cpuAimed ? `CPU <= ${AIM_CPU_RATIO}x` : ''].filter(Boolean);
          const met = (!latencyAimed.has(r) || added(r) < AIM_ADDED_MS) && (!cpuAimed || cpuRatio(r) <= AIM_CPU_RATIO);
          return [
            r.label,
            r.samples.length,
            f(median(r.samples)),
            f(p99(r.samples)),
            r.baseline ? signed(added(r)) : '',
            r.baseline ? signed(addedP99(r)) : '',
            r.cpuUs === undefined ? '' : r.cpuUs.toFixed(0),
            cpuAimed ? `${r.cpuUs! >= r.baseline!.cpuUs! ? '+' : '-'}${Math.abs(r.cpuUs! - r.baseline!.cpuUs!).toFixed(0)}` : '',
            cpuAimed ? cpuRatio(r).toFixed(2) : '',
            aims.join(', '),
            aims.length ? (met ? 'aims met' : 'NOT met') : '',
          ];
        }),
      ),
    );
    console.log(
      '\nCPU µs/call: CPU time of this process (the client, and Hangar when proxied) during the call, user + system; ' +
        'the fake provider runs in its own process. CPU ratio: proxied CPU µs/call / direct. The proxy writes `start` ' +
        'while its request to the provider goes out: first text is the comparable figure, first byte is reported beside.',
    );

    const figures: Record<string, number> = {
      'json.direct_median_ms': median(jd.samples),
      'json.direct_p99_ms': p99(jd.samples),
      'json.proxy_median_ms': median(jp.samples),
      'json.proxy_p99_ms': p99(jp.samples),
      'json.added_median_ms': added(jp),
      'json.added_p99_ms': addedP99(jp),
      'json.direct_cpu_us': jd.cpuUs!,
      'json.proxy_cpu_us': jp.cpuUs!,
      'json.added_cpu_us': jp.cpuUs! - jd.cpuUs!,
      'json.cpu_ratio': cpuRatio(jp),
      'stream.direct_median_ms': median(sd.samples),
      'stream.direct_p99_ms': p99(sd.samples),
      'stream.proxy_median_ms': median(sp.samples),
      'stream.proxy_p99_ms': p99(sp.samples),
      'stream.added_median_ms': added(sp),
      'stream.added_p99_ms': addedP99(sp),
      'stream.direct_first_byte_ms': median(bd.samples),
      'stream.added_first_byte_ms': added(bp),
      'stream.added_first_byte_p99_ms': addedP99(bp),
      'stream.direct_first_text_ms': median(td.samples),
      'stream.added_first_text_ms': added(tp),
      'stream.added_first_text_p99_ms': addedP99(tp),
      'stream.direct_cpu_us': sd.cpuUs!,
      'stream.proxy_cpu_us': sp.cpuUs!,
      'stream.added_cpu_us': sp.cpuUs! - sd.cpuUs!,
      'stream.cpu_ratio': cpuRatio(sp),
    };
    const aims: Aim[] = [
      { name: 'JSON: added median', figure: 'json.added_median_ms', target: `< ${AIM_ADDED_MS} ms`, met: added(jp) < AIM_ADDED_MS },
      {
        name: 'stream: added median to the first text-delta line',
        figure: 'stream.added_first_text_ms',
        target: `< ${AIM_ADDED_MS} ms`,
        met: added(tp) < AIM_ADDED_MS,
      },
      { name: 'JSON: proxied CPU / direct CPU', figure: 'json.cpu_ratio', target: `<= ${AIM_CPU_RATIO}`, met: cpuRatio(jp) <= AIM_CPU_RATIO },
      { name: 'stream: proxied CPU / direct CPU', figure: 'stream.cpu_ratio', target: `<= ${AIM_CPU_RATIO}`, met: cpuRatio(sp) <= AIM_CPU_RATIO },
    ];
    const met = aims.filter((a) => a.met).length;
    const shown = (a: Aim) => (a.figure.endsWith('_ms') ? `${signed(figures[a.figure]!)} ms` : figures[a.figure]!.toFixed(2));
    console.log(`\naims (from the issue):`);
    for (const a of aims) console.log(`  ${a.name}: ${shown(a)}, aim ${a.target}: ${a.met ? 'met' : 'NOT met'}`);
    console.log(`aims met: ${met}/${aims.length}`);

    if (values.profile) await profileAddedTime(calls, iterations);

    const summary =
      `models${values.sdk ? ' (--sdk)' : ''}: added median ${signed(added(jp))} ms JSON (p99 ${signed(addedP99(jp))}), ` +
      `${signed(added(tp))} ms to first text (p99 ${signed(addedP99(tp))}), ${signed(added(bp))} ms to first byte, ` +
      `${signed(added(sp))} ms stream total (p99 ${signed(addedP99(sp))}); CPU ratio ${cpuRatio(jp).toFixed(2)} JSON, ` +
      `${cpuRatio(sp).toFixed(2)} stream; aims met ${met}/${aims.length}`;
    return { summary, figures, aims };
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
    process.off('exit', onExit);
  }
}

/** Profiles `n` direct and `n` proxied calls of each mode and prints, per bucket, CPU µs per call and the difference. */
async function profileAddedTime(calls: ReturnType<typeof makeCalls>, n: number): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'hangar-bench-prof-'));
  const modes: [string, () => Promise<unknown>, () => Promise<unknown>][] = [
    ['json', calls.directJson, calls.proxyJson],
    ['stream', calls.directStream, calls.proxyStream],
  ];
  console.log(`\nCPU profiles of this process (V8 sampler, 100 µs), ${n} calls each, in ${dir}:`);
  for (const [mode, direct, proxied] of modes) {
    const reports: ProfileReport[] = [];
    for (const [who, fn] of [
      ['direct', direct],
      ['proxied', proxied],
    ] as const) {
      const file = await profile(path.join(dir, `models-${mode}-${who}.cpuprofile`), async () => {
        for (let i = 0; i < n; i++) await fn();
      });
      reports.push(analyzeProfile(file, BUCKETS, OTHER));
    }
    const [d, p] = reports as [ProfileReport, ProfileReport];
    const per = (r: ProfileReport, label: string) => ((r.buckets.find(([l]) => l === label)?.[1] ?? 0) * 1000) / n;
    const labels = [...BUCKETS.map((b) => b.label), OTHER].filter((l) => per(d, l) > 0 || per(p, l) > 0);
    const rows = labels.map((l) => [
      l,
      per(d, l).toFixed(0),
      per(p, l).toFixed(0),
      `${per(p, l) - per(d, l) >= 0 ? '+' : ''}${(per(p, l) - per(d, l)).toFixed(0)}`,
    ]);
    rows.push([
      'total sampled CPU',
      ((d.totalMs * 1000) / n).toFixed(0),
      ((p.totalMs * 1000) / n).toFixed(0),
      `+${(((p.totalMs - d.totalMs) * 1000) / n).toFixed(0)}`,
    ]);
    console.log(`\n${mode}: where the time goes, CPU µs per call`);
    console.log(table(['bucket', 'direct', 'proxied', 'added'], rows));
    console.log(`\n${mode}, proxied: heaviest functions, self time`);
    console.log(
      table(
        ['function', 'µs/call'],
        p.selfFns.slice(0, 15).map(([k, ms]) => [k, ((ms * 1000) / n).toFixed(1)]),
      ),
    );
  }
}

// lib/child.ts starts this file as a child (`node --import tsx bench/models.ts`, with an IPC channel): the fake provider.
if (process.argv[1] && path.resolve(process.argv[1]) === SELF) {
  if (process.send) fakeMain();
  else {
    console.error('bench/models.ts is the fake provider child of `npm run bench -- models`; run that instead');
    process.exit(2);
  }
}
