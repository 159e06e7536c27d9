/**
 * `threads`: live thread frames and durable appends, each against a bare baseline, in one run on one machine.
 *   (a) fan-out: one publisher, N (500) WebSocket subscribers of one thread, transient `assistant_message_delta`
 *       frames. Baseline: a bare `ws` WebSocketServer broadcasting the same JSON (same bytes) to N clients.
 *       Hangar: frames published as the POST route does after its checks (`deps.bus.publish(threadChannel(id),
 *       frame)`, through the in-process bus and the per-process hub to the sockets), and,
 *       separately, through `POST /v1/thread-events` over HTTP. Both servers run in this process (Hangar built as
 *       test/harness.ts does, the bare server beside it, measured one at a time); the N clients (and the HTTP
 *       publisher) run in one child process, so their CPU is not the server's. Each frame carries its publish time
 *       (CLOCK_MONOTONIC, shared by the processes of one host); clients record receive - publish. Steps per target: a
 *       paced one (--rate frames/s, 20 × 500 = 10,000 deliveries/s) for latency, and a saturation one (publish as
 *       fast as possible) for deliveries/s. Rounds alternate the order (ABBA).
 *   (b) durable appends: sequential `appendDurable` calls on one thread (one frame; a batch), and --threads (100)
 *       concurrent writers on as many threads, on the embedded SQLite default; baseline: the same JSONL lines
 *       appended and fsynced by `deps.blobs.append` alone (one file; 100 files), ABBA.
 * Options: --subscribers N (500), --rate R (20), --seconds S (paced seconds per target and round, 4),
 * --saturation S (3), --rounds N (2), --durable-seconds S (per step and target, split over the rounds; 4),
 * --threads N (100), --batch N (10), --no-http, --only fanout|durable (one part), --postgres URL (Hangar on that
 * PostgreSQL, in a schema of its own dropped at the end, instead of the embedded SQLite).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { statfsSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { setImmediate as nextTick, setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { WebSocket, WebSocketServer } from 'ws';
import type { DurableInput } from '../src/domains/threads/index.js';
import { CHILD_NODE_FLAGS } from './lib/child.js';
import type { BenchOutcome } from './lib/results.js';
import { table } from './lib/load.js';

export const description = 'thread fan-out to 500 WebSocket subscribers vs a bare ws broadcast; appendDurable vs a bare JSONL append+fsync';

/** Aims from the issue. */
const AIMS = { p99Ms: 50, ratio: 0.6, durableRatio: 0.5 };
/** As socket.ts: above this many unsent bytes a subscriber's transient frames are dropped (the bare server does the same). */
const SOFT_BYTES = 256 * 1024;
const DELTA_CHARS = 32;
const FILLER = ' the quick brown fox jumps over the lazy dog';

/** Microseconds on CLOCK_MONOTONIC: the same clock in every process of the host. */
const nowUs = () => Number(process.hrtime.bigint() / 1000n);

interface FrameIds {
  runId: string;
  rolloutId: string;
  threadId: string;
}

/** A transient delta whose text starts with `<phase>:<publish µs>:`, padded to a fixed length. */
function deltaText(phase: number): string {
  const stamp = `${phase}:${nowUs()}:`;
  return stamp + FILLER.slice(0, Math.max(0, DELTA_CHARS - stamp.length));
}

/** The frame as the POST route takes it (`frame`); Hangar adds `threadId`, so the frame on the wire is `wireFrame`. */
const postFrame = (ids: FrameIds, phase: number, seq: number) => ({
  type: 'assistant_message_delta' as const,
  runId: ids.runId,
  rolloutId: ids.rolloutId,
  sequenceNumber: seq,
  delta: deltaText(phase),
});
const wireFrame = (ids: FrameIds, phase: number, seq: number) => ({ ...postFrame(ids, phase, seq), threadId: ids.threadId });

// ---- statistics ------------------------------------------------------------------------------

function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}
const median = (xs: number[]) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    50,
  );
const p90 = (xs: number[]) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    90,
  );

// ---- the clients' child process ---------------------------------------------------------------

type Msg = { type: string; id?: number; [k: string]: unknown };

interface ClientReport {
  deliveries: number;
  /** Receive - publish, µs, one per delivery of the phase. */
  latencies: Float64Array;
  firstSentUs: number;
  lastRecvUs: number;
  cpuUs: number;
  stray: number;
  unexpectedCloses: number;
}

const DELTA_KEY = Buffer.from('"delta":"');

/** Runs in the child: N WebSocket clients, and the HTTP publisher of the POST path. */
function clientsMain(): void {
  const sockets: WebSocket[] = [];
  let closing = false;
  let unexpectedCloses = 0;
  let phase = -1;
  let lat = new Float64Array(1 << 16);
  let n = 0;
  let stray = 0;
  let firstSent = Infinity;
  let lastRecv = 0;
  let cpu0 = process.cpuUsage();

  const onFrame = (data: Buffer) => {
    const now = nowUs();
    let i = data.indexOf(DELTA_KEY);
    if (i < 0) return void stray++;
    i += DELTA_KEY.length;
    let p = 0;
    let sent = 0;
    for (let c = data[i++]; c !== 58; c = data[i++]) {
      if (c === undefined || c < 48 || c > 57) return void stray++;
      p = p * 10 + c - 48;
    }
    for (let c = data[i++]; c !== 58; c = data[i++]) {
      if (c === undefined || c < 48 || c > 57) return void stray++;
      sent = sent * 10 + c - 48;
    }
    if (p !== phase) return void stray++;
    if (n === lat.length) {
      const grown = new Float64Array(lat.length * 2);
      grown.set(lat);
      lat = grown;
    }
    lat[n++] = now - sent;
    if (sent < firstSent) firstSent = sent;
    lastRecv = now;
  };

  /** Opens one client; it counts as connected once the first frame (the snapshot) arrives. */
  const openOne = (url: string) =>
    new Promise<WebSocket>((resolve, reject) => {
      const ws = new WebSocket(url, { perMessageDeflate: false });
      let open = false;
      ws.once('message', () => {
        open = true;
        ws.on('message', onFrame);
        resolve(ws);
      });
      ws.on('error', (err) => {
        if (!open) reject(err);
      });
      ws.on('close', (code, reason) => {
        if (!open) reject(new Error(`closed before the first frame: ${code} ${reason.toString()}`));
        else if (!closing) unexpectedCloses++;
      });
    });

  const handlers: Record<string, (m: Msg) => Promise<Record<string, unknown>>> = {
    async connect(m) {
      const t0 = performance.now();
      closing = false;
      unexpectedCloses = 0;
      const url = m.url as string;
      let left = m.n as number;
      const worker = async () => {
        while (left > 0) {
          left--;
          sockets.push(await openOne(url));
        }
      };
      await Promise.all(Array.from({ length: Math.min(50, left) }, worker));
      return { ms: performance.now() - t0 };
    },
    async phase(m) {
      phase = m.phase as number;
      n = 0;
      stray = 0;
      firstSent = Infinity;
      lastRecv = 0;
      cpu0 = process.cpuUsage();
      return {};
    },
    async count() {
      return { count: n };
    },
    async report() {
      const cpu = process.cpuUsage(cpu0);
      const r: ClientReport = {
        deliveries: n,
        latencies: lat.slice(0, n),
        firstSentUs: firstSent,
        lastRecvUs: lastRecv,
        cpuUs: cpu.user + cpu.system,
        stray,
        unexpectedCloses,
      };
      phase = -1;
      return { report: r };
    },
    async disconnect() {
      closing = true;
      await Promise.all(
        sockets.splice(0).map(
          (ws) =>
            new Promise<void>((resolve) => {
              if (ws.readyState === WebSocket.CLOSED) return resolve();
              const timer = setTimeout(() => {
                ws.terminate();
                resolve();
              }, 2000);
              ws.once('close', () => {
                clearTimeout(timer);
                resolve();
              });
              ws.close(1000, 'done');
            }),
        ),
      );
      return {};
    },
    /** POST /v1/thread-events: paced (rate frames/s) or saturating (`concurrency` loops back to back) for `seconds`. */
    async publish(m) {
      const ids = m.ids as FrameIds;
      const agent = new http.Agent({ keepAlive: true, maxSockets: m.concurrency as number });
      let seq = 0;
      let published = 0;
      let failed = 0;
      let firstError = '';
      const post = () =>
        new Promise<void>((resolve, reject) => {
          const body = JSON.stringify({ threadId: ids.threadId, frame: postFrame(ids, m.phase as number, ++seq) });
          const req = http.request(
            `${m.url}/v1/thread-events`,
            {
              method: 'POST',
              agent,
              headers: { 'x-api-key': m.apiKey as string, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
            },
            (res) => {
              let text = '';
              res.setEncoding('utf8').on('data', (d) => (text += d));
              res.on('end', () => {
                if (res.statusCode === 202) published++;
                else {
                  failed++;
                  firstError ||= `${res.statusCode}: ${text.slice(0, 300)}`;
                }
                resolve();
              });
            },
          );
          req.on('error', reject);
          req.end(body);
        });
      try {
        const seconds = m.seconds as number;
        if (m.mode === 'paced') await paced(m.rate as number, seconds, post);
        else {
          const end = performance.now() + seconds * 1000;
          await Promise.all(
            Array.from({ length: m.concurrency as number }, async () => {
              while (performance.now() < end) await post();
            }),
          );
        }
      } finally {
        agent.destroy();
      }
      return { published, failed, firstError };
    },
  };

  process.on('message', (m: Msg) => {
    const h = handlers[m.type];
    if (!h) return;
    h(m).then(
      (r) => process.send!({ id: m.id, ok: true, ...r }),
      (err) => process.send!({ id: m.id, ok: false, message: (err as Error).stack ?? String(err) }),
    );
  });
  process.on('disconnect', () => {
    for (const ws of sockets) ws.terminate();
    process.exit(0);
  });
  process.send!({ type: 'ready' });
}

/** Calls `publish` at `rate` per second for `seconds`, on an absolute schedule (a late call does not shift the rest). */
async function paced(rate: number, seconds: number, publish: () => unknown): Promise<number> {
  const interval = 1000 / rate;
  const t0 = performance.now();
  let i = 0;
  for (; i * interval < seconds * 1000; i++) {
    const wait = t0 + i * interval - performance.now();
    if (wait > 0) await sleep(wait);
    await publish();
  }
  return i;
}

/** The parent's handle on the clients' child. */
class Clients {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (m: Msg) => void; reject: (e: Error) => void }>();

  private constructor(readonly proc: ChildProcess) {
    proc.on('message', (m: Msg) => {
      const p = m.id !== undefined ? this.pending.get(m.id) : undefined;
      if (!p) return;
      this.pending.delete(m.id!);
      if (m.ok) p.resolve(m);
      else p.reject(new Error(`clients: ${m.message}`));
    });
    proc.on('exit', (code, signal) => {
      for (const p of this.pending.values()) p.reject(new Error(`clients: exited (${signal ?? code})`));
      this.pending.clear();
    });
  }

  static async start(): Promise<Clients> {
    const proc = spawn(process.execPath, [...CHILD_NODE_FLAGS, fileURLToPath(import.meta.url), '--clients'], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
    });
    const clients = new Clients(proc);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('clients: not ready within 30 s')), 30_000);
      proc.once('message', () => {
        clearTimeout(timer);
        resolve();
      });
      proc.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`clients: exited (${code}) at start`));
      });
    }).catch((err) => {
      proc.kill('SIGKILL');
      throw err;
    });
    return clients;
  }

  call(type: string, extra: Record<string, unknown> = {}, timeoutMs = 60_000): Promise<Msg> {
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`clients: no answer to "${type}" within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (m) => {
          clearTimeout(timer);
          resolve(m);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.proc.send({ type, id, ...extra });
    });
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => this.proc.once('exit', () => resolve()));
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), 3000);
    await exited;
    clearTimeout(timer);
  }
}

// ---- servers in this process -----------------------------------------------------------------

type Hangar = import('./lib/in-process.js').InProcessHangar;

/** Hangar in this process (loaded lazily: the clients' child process never needs it). */
async function startHangar(env: Record<string, string>): Promise<Hangar> {
  return (await import('./lib/in-process.js')).startInProcessHangar('threads', env);
}

async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.query(`DROP SCHEMA IF EXISTS "${schema}_pgboss" CASCADE`);
  } finally {
    await client.end();
  }
}

async function stopHangar(h: Hangar): Promise<void> {
  await (await import('./lib/in-process.js')).stopInProcessHangar(h);
}

/** The baseline: a bare ws server; every client gets `{"type":"snapshot"}` first, as Hangar's do, then the broadcasts. */
async function startBare(): Promise<{ wss: WebSocketServer; url: string; broadcast: (json: string) => void }> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, maxPayload: 64 * 1024 });
  await new Promise<void>((resolve, reject) => {
    wss.once('listening', resolve);
    wss.once('error', reject);
  });
  wss.on('connection', (ws) => {
    ws.on('error', () => undefined);
    ws.send('{"type":"snapshot"}');
  });
  const broadcast = (json: string) => {
    for (const ws of wss.clients) {
      // The same rule as Hangar's socket.ts: a transient frame is dropped for a client with more than SOFT_BYTES unsent.
      if (ws.readyState !== WebSocket.OPEN || ws.bufferedAmount > SOFT_BYTES) continue;
      ws.send(json);
    }
  };
  return { wss, url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/`, broadcast };
}

// ---- (a) fan-out -----------------------------------------------------------------------------

type Target = 'bare' | 'bus' | 'http';
type Step = 'paced' | 'saturation';

interface Phase {
  published: number;
  deliveries: number;
  /** First publish to last delivery, and at least the step's publishing time; seconds. */
  wall: number;
  latencies: Float64Array;
  serverCpuUs: number;
  clientCpuUs: number;
  unexpectedCloses: number;
}

const TARGET_LABEL: Record<Target, string> = {
  bare: 'bare ws broadcast',
  bus: 'Hangar bus.publish -> hub -> sockets',
  http: 'Hangar POST /v1/thread-events',
};

// ---- (b) durable appends ---------------------------------------------------------------------

interface DurableRow {
  label: string;
  writers: number;
  perCall: number;
  calls: number;
  seconds: number;
  latencies: number[];
  baseline?: DurableRow;
}

/** `writers` loops calling `fn(writer)` back to back for `seconds`; adds to `row`. */
async function writeLoops(row: DurableRow, seconds: number, fn: (writer: number) => Promise<unknown>): Promise<void> {
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  await Promise.all(
    Array.from({ length: row.writers }, async (_, w) => {
      while (performance.now() < end) {
        const t = performance.now();
        await fn(w);
        row.latencies.push(performance.now() - t);
        row.calls++;
      }
    }),
  );
  row.seconds += (performance.now() - t0) / 1000;
}

// ---- the benchmark ---------------------------------------------------------------------------

export async function run(argv: string[]): Promise<BenchOutcome> {
  const { values } = parseArgs({
    args: argv,
    options: {
      subscribers: { type: 'string', default: '500' },
      rate: { type: 'string', default: '20' },
      seconds: { type: 'string', default: '4' },
      saturation: { type: 'string', default: '3' },
      rounds: { type: 'string', default: '2' },
      'durable-seconds': { type: 'string', default: '4' },
      threads: { type: 'string', default: '100' },
      batch: { type: 'string', default: '10' },
      'no-http': { type: 'boolean', default: false },
      only: { type: 'string' },
      postgres: { type: 'string' },
    },
    strict: false,
  });
  const only = values.only as string | undefined;
  if (only !== undefined && only !== 'fanout' && only !== 'durable') throw new Error('--only must be fanout or durable');
  const fanout = only !== 'durable';
  const durable = only !== 'fanout';
  const pgUrl = values.postgres as string | undefined;
  const pgSchema = pgUrl ? `bench_threads_${Date.now().toString(36)}` : undefined;
  const subscribers = Number(values.subscribers);
  const rate = Number(values.rate);
  const pacedSeconds = Number(values.seconds);
  const saturationSeconds = Number(values.saturation);
  const rounds = Number(values.rounds);
  const durableSeconds = Number(values['durable-seconds']);
  const threadCount = Number(values.threads);
  const batch = Number(values.batch);
  for (const [k, v] of Object.entries({
    subscribers,
    rate,
    seconds: pacedSeconds,
    saturation: saturationSeconds,
    rounds,
    'durable-seconds': durableSeconds,
    threads: threadCount,
    batch,
  })) {
    if (!(v > 0)) throw new Error(`--${k} must be a positive number`);
  }
  const withHttp = !values['no-http'];
  const { appendDurable, createThread } = await import('../src/domains/threads/index.js');
  const { threadChannel, jsonlKey } = await import('../src/domains/threads/frames.js');
  const { nowIso, prefixedId } = await import('../src/platform/ids.js');

  let hangar: Hangar | undefined;
  let bare: Awaited<ReturnType<typeof startBare>> | undefined;
  let clients: Clients | undefined;
  const cleanup = async () => {
    if (clients) await clients.stop().catch(() => undefined);
    clients = undefined;
    if (bare) {
      for (const ws of bare.wss.clients) ws.terminate();
      await new Promise<void>((resolve) => bare!.wss.close(() => resolve()));
    }
    bare = undefined;
    if (hangar) await stopHangar(hangar).catch((err) => console.error(`threads: Hangar cleanup failed: ${(err as Error).message}`));
    hangar = undefined;
    if (pgUrl && pgSchema)
      await dropSchema(pgUrl, pgSchema).catch((err) => console.error(`threads: dropping ${pgSchema} failed: ${(err as Error).message}`));
  };
  const onSignal = () => {
    void cleanup().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  try {
    process.stdout.write('starting Hangar (in process), the bare ws server (in process) and the clients (child process)... ');
    hangar = await startHangar(pgUrl && pgSchema ? { DATABASE_URL: `${pgUrl}${pgUrl.includes('?') ? '&' : '?'}schema=${pgSchema}` } : {});
    bare = await startBare();
    if (fanout) clients = await Clients.start();
    const h = hangar;
    const b = bare;
    const c = clients!;
    const fs = statfsSync(h.dataDir);
    const fsNote = fs.type === 0x01021994 ? ' (tmpfs: fsync costs nothing here; set TMPDIR to a disk)' : '';
    console.log(`Hangar on ${h.url}, data dir ${h.dataDir}${fsNote}, database ${pgSchema ? `PostgreSQL (schema ${pgSchema})` : 'embedded SQLite'}`);

    const thread = await createThread(h.ownerCtx, { executionMode: 'managed', title: 'fan-out' });
    const ids: FrameIds = { runId: prefixedId('run'), rolloutId: thread.activeRolloutId!, threadId: thread.id };
    const frameBytes = Buffer.byteLength(JSON.stringify(wireFrame(ids, 1, 1)));
    const hangarWs = `${h.url.replace('http:', 'ws:')}/v1/threads/${thread.id}/events?api_key=${encodeURIComponent(h.apiKey)}`;

    // In-process publishers. Each stamps the frame when it publishes it.
    let seq = 0;
    const publishers: Record<'bare' | 'bus', (phase: number) => unknown> = {
      bare: (phase) => b.broadcast(JSON.stringify(wireFrame(ids, phase, ++seq))),
      // As `publishFrame` does: the frame itself is the bus message (the hub drops what is not a frame).
      bus: (phase) => h.deps.bus.publish(threadChannel(thread.id), wireFrame(ids, phase, ++seq)),
    };

    let phaseNo = 0;
    /** One measured step: publish (here or, for http, from the child), wait until deliveries stop, collect. */
    const runPhase = async (target: Target, step: Step, seconds: number): Promise<Phase> => {
      const phase = ++phaseNo;
      await c.call('phase', { phase });
      const cpu0 = process.cpuUsage();
      let published = 0;
      if (target === 'http') {
        const r = await c.call('publish', {
          url: h.url,
          apiKey: h.apiKey,
          ids,
          phase,
          mode: step,
          rate,
          seconds,
          concurrency: step === 'paced' ? 1 : 4,
        });
        if (r.failed) throw new Error(`POST /v1/thread-events failed ${r.failed} times; first: ${r.firstError}`);
        published = r.published as number;
      } else {
        const publish = publishers[target];
        if (step === 'paced') published = await paced(rate, seconds, () => publish(phase));
        else {
          const end = performance.now() + seconds * 1000;
          while (performance.now() < end) {
            await publish(phase);
            published++;
            await nextTick(); // one frame per turn of the event loop, so the sockets' I/O runs in between
          }
        }
      }
      // Wait until nothing more arrives (300 ms without a new delivery).
      let last = -1;
      for (let stable = 0, deadline = Date.now() + 20_000; stable < 3 && Date.now() < deadline; ) {
        await sleep(100);
        const count = (await c.call('count')).count as number;
        stable = count === last ? stable + 1 : 0;
        last = count;
      }
      const cpu = process.cpuUsage(cpu0);
      const r = (await c.call('report')).report as ClientReport;
      return {
        published,
        deliveries: r.deliveries,
        // At least the publishing time: a paced step's last frame goes out one interval before its end.
        wall: Math.max(seconds, r.deliveries ? (r.lastRecvUs - r.firstSentUs) / 1e6 : 0),
        latencies: r.latencies,
        serverCpuUs: cpu.user + cpu.system,
        clientCpuUs: r.cpuUs,
        unexpectedCloses: r.unexpectedCloses,
      };
    };

    const results = new Map<string, Phase[]>();
    const keep = (target: Target, step: Step, p: Phase) => {
      const k = `${target}/${step}`;
      results.set(k, [...(results.get(k) ?? []), p]);
    };
    const connect = async (target: 'bare' | 'hangar') => {
      // A client counts as connected at its first frame; Hangar sends the snapshot after the socket joined the hub.
      await c.call('connect', { url: target === 'bare' ? b.url : hangarWs, n: subscribers }, 120_000);
    };
    const measureTarget = async (target: Target, warm: boolean) => {
      if (warm) {
        await runPhase(target, 'saturation', 1);
        await runPhase(target, 'paced', 1);
      }
      for (const step of ['paced', 'saturation'] as const)
        keep(target, step, await runPhase(target, step, step === 'paced' ? pacedSeconds : saturationSeconds));
    };

    const hangarTargets: Target[] = withHttp ? ['bus', 'http'] : ['bus'];
    if (fanout)
      console.log(
        `(a) fan-out: ${subscribers} subscribers, ${frameBytes}-byte frames; per target and round ${pacedSeconds} s at ${rate} frames/s ` +
          `(${rate * subscribers} deliveries/s) and ${saturationSeconds} s saturation, after a 2 s warm-up; ${rounds} rounds, ABBA`,
      );
    for (let round = 0; fanout && round < rounds; round++) {
      const order: ('bare' | 'hangar')[] = round % 2 === 0 ? ['bare', 'hangar'] : ['hangar', 'bare'];
      for (const server of order) {
        await connect(server);
        const targets: Target[] = server === 'bare' ? ['bare'] : round % 2 === 0 ? hangarTargets : [...hangarTargets].reverse();
        for (const t of targets) await measureTarget(t, round === 0);
        await c.call('disconnect');
      }
    }

    // ---- (b)
    const rollout = thread.activeRolloutId!;
    const payload = { messageId: 'msg_bench', text: FILLER.repeat(4).trim() };
    const frame = (): DurableInput => ({ type: 'assistant_message', runId: ids.runId, payload });
    /** The JSONL line appendDurable writes for one such frame. */
    const line = (seqNo: number, threadId: string) =>
      `${JSON.stringify({ sequence: seqNo, rolloutId: rollout, threadId, runId: ids.runId, type: 'assistant_message', payload, createdAt: nowIso() })}\n`;
    const single = await createThread(h.ownerCtx, { executionMode: 'managed', title: 'durable one' });
    const batched = await createThread(h.ownerCtx, { executionMode: 'managed', title: 'durable batch' });
    const many: string[] = [];
    for (let i = 0; durable && i < threadCount; i++)
      many.push((await createThread(h.ownerCtx, { executionMode: 'managed', title: `durable ${i}` })).id);
    const blobKey = (name: string) => jsonlKey('bench', name);
    const blobSeq = new Map<string, number>();
    const blobLines = (key: string, n: number) => {
      let s = blobSeq.get(key) ?? 0;
      let text = '';
      for (let i = 0; i < n; i++) text += line(++s, key);
      blobSeq.set(key, s);
      return text;
    };
    const row = (label: string, writers: number, perCall: number, baseline?: DurableRow): DurableRow => ({
      label,
      writers,
      perCall,
      calls: 0,
      seconds: 0,
      latencies: [],
      baseline,
    });
    const bare1 = row('bare blobs.append+fsync, 1 file', 1, 1);
    const hangar1 = row('appendDurable, 1 thread', 1, 1, bare1);
    const bareB = row(`bare blobs.append+fsync, 1 file, ${batch} lines`, 1, batch);
    const hangarB = row(`appendDurable, 1 thread, ${batch} frames/call`, 1, batch, bareB);
    const bareN = row(`bare blobs.append+fsync, ${threadCount} files`, threadCount, 1);
    const hangarN = row(`appendDurable, ${threadCount} threads`, threadCount, 1, bareN);
    const pairs: [DurableRow, () => Promise<void>, DurableRow, () => Promise<void>][] = [];
    const per = durableSeconds / rounds;
    const frames = Array.from({ length: batch }, frame);
    pairs.push([
      bare1,
      () => writeLoops(bare1, per, () => h.deps.blobs.append(blobKey('one'), blobLines('one', 1))),
      hangar1,
      () => writeLoops(hangar1, per, () => appendDurable(h.deps, single.id, [frame()])),
    ]);
    pairs.push([
      bareB,
      () => writeLoops(bareB, per, () => h.deps.blobs.append(blobKey('batch'), blobLines('batch', batch))),
      hangarB,
      () => writeLoops(hangarB, per, () => appendDurable(h.deps, batched.id, frames)),
    ]);
    pairs.push([
      bareN,
      () => writeLoops(bareN, per, (w) => h.deps.blobs.append(blobKey(`w${w}`), blobLines(`w${w}`, 1))),
      hangarN,
      () => writeLoops(hangarN, per, (w) => appendDurable(h.deps, many[w]!, [frame()])),
    ]);
    if (durable)
      console.log(
        `(b) durable appends: ${durableSeconds} s per step and target (${rounds} rounds, ABBA), after a warm-up; JSONL in ${path.join(h.dataDir, 'blobs')}`,
      );
    // Warm-up: a few of each, not recorded.
    for (let i = 0; durable && i < 20; i++) {
      await h.deps.blobs.append(blobKey('warm'), blobLines('warm', 1));
      await appendDurable(h.deps, single.id, [frame()]);
    }
    for (let round = 0; durable && round < rounds; round++) {
      for (const [, bareRun, , hangarRun] of pairs) {
        const steps = round % 2 === 0 ? [bareRun, hangarRun] : [hangarRun, bareRun];
        for (const s of steps) await s();
      }
    }

    // ---- report (a)
    const pool = (k: string) => {
      const ps = results.get(k) ?? [];
      const total = ps.reduce((s, p) => s + p.latencies.length, 0);
      const all = new Float64Array(total);
      let at = 0;
      for (const p of ps) {
        all.set(p.latencies, at);
        at += p.latencies.length;
      }
      all.sort();
      const wall = ps.reduce((s, p) => s + p.wall, 0);
      const deliveries = ps.reduce((s, p) => s + p.deliveries, 0);
      const published = ps.reduce((s, p) => s + p.published, 0);
      return {
        published,
        publishedPerS: published / wall,
        deliveries,
        deliveriesPerS: deliveries / wall,
        delivered: deliveries / Math.max(1, published * subscribers),
        p50: percentile(all, 50) / 1000,
        p99: percentile(all, 99) / 1000,
        max: all.length ? all[all.length - 1]! / 1000 : NaN,
        serverCpu: ps.reduce((s, p) => s + p.serverCpuUs, 0) / 1e6 / wall,
        serverUsPerDelivery: ps.reduce((s, p) => s + p.serverCpuUs, 0) / Math.max(1, deliveries),
        clientCpu: ps.reduce((s, p) => s + p.clientCpuUs, 0) / 1e6 / wall,
        unexpectedCloses: ps.reduce((s, p) => s + p.unexpectedCloses, 0),
      };
    };
    type Pooled = ReturnType<typeof pool>;
    const targetRate = rate * subscribers;
    const aimResults: { label: string; met: boolean }[] = [];
    const rowsA: (string | number)[][] = [];
    const pooled: Record<string, Pooled> = {};
    const allTargets: Target[] = ['bare', ...hangarTargets];
    for (const step of fanout ? (['paced', 'saturation'] as const) : []) {
      const base = pool(`bare/${step}`);
      for (const t of allTargets) {
        const p = pool(`${t}/${step}`);
        pooled[`${t}/${step}`] = p;
        if (p.unexpectedCloses) throw new Error(`${t}: ${p.unexpectedCloses} subscribers were closed during the ${step} step`);
        // Frames that reach nobody measure nothing (a message the hub does not take as a frame is dropped).
        if (p.deliveries === 0) throw new Error(`${t}: no frame reached a subscriber during the ${step} step`);
        const ratio = p.deliveriesPerS / base.deliveriesPerS;
        let aim = '';
        let result = '';
        if (t !== 'bare') {
          // Paced: p99 under the aim while delivering (nearly) the target rate; saturation: deliveries/s ratio.
          const met = step === 'paced' ? p.p99 < AIMS.p99Ms && p.deliveriesPerS >= 0.98 * targetRate : ratio >= AIMS.ratio;
          aim = step === 'paced' ? `p99 < ${AIMS.p99Ms} ms` : `ratio >= ${AIMS.ratio}`;
          result = met ? 'aim met' : 'aim NOT met';
          aimResults.push({ label: `${t}/${step}`, met });
        }
        rowsA.push([
          TARGET_LABEL[t],
          step === 'paced' ? `${rate} fr/s` : 'saturation',
          p.publishedPerS.toFixed(1),
          Math.round(p.deliveriesPerS),
          `${(100 * p.delivered).toFixed(1)}%`,
          p.p50.toFixed(2),
          p.p99.toFixed(2),
          p.max.toFixed(1),
          `${Math.round(100 * p.serverCpu)}%`,
          p.serverUsPerDelivery.toFixed(2),
          `${Math.round(100 * p.clientCpu)}%`,
          t === 'bare' ? '' : `x${ratio.toFixed(2)}`,
          aim,
          result,
        ]);
      }
    }
    if (fanout) console.log('');
    if (fanout)
      console.log(
        table(
          [
            'target',
            'step',
            'frames/s',
            'deliveries/s',
            'delivered',
            'p50 ms',
            'p99 ms',
            'max ms',
            'server CPU',
            'CPU µs/delivery',
            'clients CPU',
            'vs bare',
            'aim',
            'result',
          ],
          rowsA,
        ),
      );

    // ---- report (b)
    const durableRows = [bare1, hangar1, bareB, hangarB, bareN, hangarN];
    const callsPerS = (r: DurableRow) => r.calls / r.seconds;
    const durableRatio = (r: DurableRow) => callsPerS(r) / callsPerS(r.baseline!);
    if (durable) {
      const met = durableRatio(hangarN) >= AIMS.durableRatio;
      aimResults.push({ label: `appendDurable, ${threadCount} threads`, met });
    }
    if (durable) console.log('');
    if (durable)
      console.log(
        table(
          [
            'target',
            'writers',
            'frames/call',
            'calls',
            'calls/s',
            'frames/s',
            'median ms',
            'p90 ms',
            'vs bare calls/s',
            'vs bare median',
            'aim',
            'result',
          ],
          durableRows.map((r) => [
            r.label,
            r.writers,
            r.perCall,
            r.calls,
            callsPerS(r).toFixed(0),
            (callsPerS(r) * r.perCall).toFixed(0),
            median(r.latencies).toFixed(2),
            p90(r.latencies).toFixed(2),
            r.baseline ? `x${(callsPerS(r) / callsPerS(r.baseline)).toFixed(2)}` : '',
            r.baseline ? `x${(median(r.latencies) / median(r.baseline.latencies)).toFixed(2)}` : '',
            r === hangarN ? `calls/s ratio >= ${AIMS.durableRatio}` : '',
            r === hangarN ? (durableRatio(r) >= AIMS.durableRatio ? 'aim met' : 'aim NOT met') : '',
          ]),
        ),
      );

    const met = aimResults.filter((a) => a.met).length;
    console.log(
      `\naims met: ${met}/${aimResults.length}${
        aimResults.some((a) => !a.met)
          ? ` (NOT met: ${aimResults
              .filter((a) => !a.met)
              .map((a) => a.label)
              .join(', ')})`
          : ''
      }`,
    );
    const figures: Record<string, number> = {};
    const parts: string[] = [];
    if (fanout) {
      const bp = pooled['bare/paced']!;
      const hp = pooled['bus/paced']!;
      const bs = pooled['bare/saturation']!;
      const hs = pooled['bus/saturation']!;
      const k = (x: number) => `${(x / 1000).toFixed(0)}k`;
      Object.assign(figures, {
        'fanout.bare_paced_p99_ms': bp.p99,
        'fanout.bus_paced_p99_ms': hp.p99,
        'fanout.bare_saturation_deliveries_per_s': bs.deliveriesPerS,
        'fanout.bus_saturation_deliveries_per_s': hs.deliveriesPerS,
        'fanout.bus_saturation_ratio': hs.deliveriesPerS / bs.deliveriesPerS,
        'fanout.bus_cpu_us_per_delivery': hs.serverUsPerDelivery,
        'fanout.bare_cpu_us_per_delivery': bs.serverUsPerDelivery,
      });
      if (withHttp) {
        const ps = pooled['http/saturation']!;
        Object.assign(figures, {
          'fanout.post_paced_p99_ms': pooled['http/paced']!.p99,
          'fanout.post_saturation_ratio': ps.deliveriesPerS / bs.deliveriesPerS,
          'fanout.post_cpu_us_per_delivery': ps.serverUsPerDelivery,
        });
      }
      parts.push(
        `fan-out to ${subscribers} p99 ${hp.p99.toFixed(1)} ms at ${k(hp.deliveriesPerS)}/s (bare ${bp.p99.toFixed(1)} ms), ` +
          `saturation ${k(hs.deliveriesPerS)} vs bare ${k(bs.deliveriesPerS)} deliveries/s (x${(hs.deliveriesPerS / bs.deliveriesPerS).toFixed(2)})` +
          (withHttp
            ? `, POST path x${(pooled['http/saturation']!.deliveriesPerS / bs.deliveriesPerS).toFixed(2)} p99 ${pooled['http/paced']!.p99.toFixed(1)} ms`
            : ''),
      );
    }
    if (durable) {
      for (const [key, r] of [
        ['one_thread', hangar1],
        ['batch', hangarB],
        ['many_threads', hangarN],
      ] as const) {
        figures[`durable.${key}_calls_per_s`] = callsPerS(r);
        figures[`durable.${key}_bare_calls_per_s`] = callsPerS(r.baseline!);
        figures[`durable.${key}_ratio`] = durableRatio(r);
        figures[`durable.${key}_median_ms`] = median(r.latencies);
      }
      parts.push(
        `appendDurable ${callsPerS(hangar1).toFixed(0)}/s on 1 thread (x${durableRatio(hangar1).toFixed(2)} of bare append+fsync), ` +
          `${callsPerS(hangarN).toFixed(0)}/s on ${threadCount} (x${durableRatio(hangarN).toFixed(2)})`,
      );
    }
    const db = pgSchema ? ' [PostgreSQL]' : '';
    return {
      summary: `threads${db}: ${parts.join('; ')}; aims met ${met}/${aimResults.length}`,
      figures,
      aims: aimResults.map((a) => ({
        name: a.label,
        figure: a.label.startsWith('appendDurable') ? 'durable.many_threads_ratio' : `fanout.${a.label.replace('/', '_')}`,
        target: a.label.startsWith('appendDurable')
          ? `>= ${AIMS.durableRatio}`
          : a.label.endsWith('paced')
            ? `p99 < ${AIMS.p99Ms} ms`
            : `>= ${AIMS.ratio}`,
        met: a.met,
      })),
    };
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
  }
}

// `node --import tsx bench/threads.ts --clients` is the clients' child process.
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url) && process.argv.includes('--clients')) clientsMain();
