/**
 * `mesh`: the device mesh's dispatch protocol (ADR 0029) at the wire, against a bare WebSocket round trip measured in
 * the same run, on the embedded SQLite default.
 *   (1) dispatch: from sending `POST /v1/run` (a local-desktop agent bound to a linked device; a new thread per run, so
 *       every run starts at once and answers `registered`) to the device reading the `{ type: 'run' }` message on its
 *       `GET /v1/runmesh/connect` WebSocket. Each run is then cancelled (`POST /v1/runs/{id}/cancel`, not timed), so
 *       none pile up.
 *   (2) frame round trip: from the device's `POST /v1/thread-events` (device token) for a run it accepted to a
 *       subscriber of the thread (`GET /v1/threads/{id}/events?api_key=...`) reading the frame: a transient
 *       `assistant_message_delta`, and a durable `assistant_message` with the device's own counter (1, 2, 3...).
 *   (3) baseline: a bare `ws` WebSocketServer on loopback that echoes; the client sends a frame of the same size and
 *       waits for the echo.
 * Everything runs in this process (Hangar built as test/harness.ts does, the device and the subscriber as `ws`
 * clients, the echo server and its client), one message at a time, so the baseline pays the same event loop and
 * loopback as Hangar's targets. Rounds alternate the order of the targets (ABBA) after a warm-up of each.
 * Options: --runs N (dispatches, 200), --frames N (transient frames, 500), --durable N (durable frames, 500),
 * --echoes N (500), --rounds N (2).
 */
import type { AddressInfo } from 'node:net';
import { generateKeyPairSync } from 'node:crypto';
import { parseArgs } from 'node:util';
import { WebSocket, WebSocketServer } from 'ws';
import { FakeOpenAI } from '../test/fakes/openai.js';
import { startInProcessHangar, stopInProcessHangar, type InProcessHangar } from './lib/in-process.js';
import { table } from './lib/load.js';

export const description = 'device mesh: POST /v1/run -> device socket dispatch, device frame -> thread subscriber, vs a bare ws echo';

const WARMUP = 20;
const FILLER = 'the quick brown fox jumps over the lazy dog ';

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

function positive(name: string, v: string | undefined): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer`);
  return n;
}

/** A WebSocket whose text messages are matched against waiters by a token they contain. */
class Reader {
  private waiters: { token: string; resolve: (at: number) => void }[] = [];
  readonly received: string[] = [];
  constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => {
      const at = performance.now();
      const text = String(data);
      const i = this.waiters.findIndex((w) => text.includes(w.token));
      if (i >= 0) this.waiters.splice(i, 1)[0]!.resolve(at);
      else this.received.push(text);
    });
  }
  /** The time the next message containing `token` arrives (call it before sending). */
  wait(token: string, timeoutMs = 10_000): Promise<number> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w.token !== token);
        reject(new Error(`no message containing ${token} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.push({
        token,
        resolve: (at) => {
          clearTimeout(timer);
          resolve(at);
        },
      });
    });
  }
  /** Drops what arrived unclaimed (cancel messages, snapshots, run_started...), so the buffer does not grow. */
  clear() {
    this.received.length = 0;
  }
  static async open(url: string, headers: Record<string, string> = {}): Promise<Reader> {
    const ws = new WebSocket(url, { headers, perMessageDeflate: false });
    const r = new Reader(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => reject(new Error(`${url}: HTTP ${res.statusCode}`)));
    });
    ws.on('error', () => undefined);
    return r;
  }
}

async function api(h: InProcessHangar, method: string, path: string, body?: unknown, auth?: Record<string, string>) {
  const res = await fetch(`${h.url}${path}`, {
    method,
    headers: { ...(auth ?? { 'x-api-key': h.apiKey }), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
  return JSON.parse(text).data;
}

/** Links a device as `hangar device link` does: start, approve (admin key), poll. */
async function linkDevice(h: InProcessHangar) {
  const { publicKey } = generateKeyPairSync('x25519');
  const key = publicKey.export({ format: 'der', type: 'spki' }).subarray(-32).toString('base64');
  const { code, pollSecret } = await api(h, 'POST', '/v1/runmesh/devices/link/start', {
    publicKey: key,
    deviceLabel: 'bench',
    os: 'linux',
    appVersion: '1.0.0',
  });
  await api(h, 'POST', '/v1/runmesh/devices/link/approve', { code });
  const poll = await api(h, 'POST', '/v1/runmesh/devices/link/poll', { code, pollSecret });
  if (poll.status !== 'approved') throw new Error(`link poll: ${JSON.stringify(poll)}`);
  return { nodeId: poll.nodeId as string, token: poll.deviceToken as string };
}

async function startEcho(): Promise<{ wss: WebSocketServer; url: string }> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
  await new Promise<void>((resolve, reject) => {
    wss.once('listening', resolve);
    wss.once('error', reject);
  });
  wss.on('connection', (ws) => {
    ws.on('error', () => undefined);
    ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
  });
  return { wss, url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/` };
}

type Target = 'echo' | 'dispatch' | 'transient' | 'durable';
const LABEL: Record<Target, string> = {
  echo: 'bare ws echo round trip',
  dispatch: 'dispatch: POST /v1/run -> device socket',
  transient: 'transient frame: device POST -> subscriber',
  durable: 'durable frame: device POST -> subscriber',
};

export async function run(argv: string[]): Promise<string> {
  const { values } = parseArgs({
    args: argv,
    options: {
      runs: { type: 'string', default: '200' },
      frames: { type: 'string', default: '500' },
      durable: { type: 'string', default: '500' },
      echoes: { type: 'string', default: '500' },
      rounds: { type: 'string', default: '2' },
    },
    strict: true,
  });
  const counts: Record<Target, number> = {
    echo: positive('echoes', values.echoes),
    dispatch: positive('runs', values.runs),
    transient: positive('frames', values.frames),
    durable: positive('durable', values.durable),
  };
  const rounds = positive('rounds', values.rounds);

  let hangar: InProcessHangar | undefined;
  let fake: FakeOpenAI | undefined;
  let echo: Awaited<ReturnType<typeof startEcho>> | undefined;
  const sockets: WebSocket[] = [];
  const cleanup = async () => {
    for (const ws of sockets.splice(0)) ws.terminate();
    if (echo) await new Promise<void>((resolve) => echo!.wss.close(() => resolve()));
    echo = undefined;
    if (hangar) await stopInProcessHangar(hangar).catch((err) => console.error(`mesh: Hangar cleanup failed: ${(err as Error).message}`));
    hangar = undefined;
    await fake?.stop().catch(() => undefined);
    fake = undefined;
  };
  const onSignal = () => {
    void cleanup().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  try {
    process.stdout.write('starting Hangar (in process), the fake model provider and the bare ws echo server... ');
    // The agent's model must resolve; no model call happens in these runs (the device would make them).
    fake = await new FakeOpenAI().start();
    hangar = await startInProcessHangar('mesh', { HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-bench', HANGAR_OPENAI_MODELS: 'm1' });
    echo = await startEcho();
    const h = hangar;
    console.log(`Hangar on ${h.url}`);

    const device = await linkDevice(h);
    await api(h, 'POST', '/v1/agents', { slug: 'local', executionMode: 'local-desktop', targetDeviceId: device.nodeId, model: 'm1' });
    const deviceAuth = { authorization: `Bearer ${device.token}` };
    const dev = await Reader.open(`${h.url.replace('http:', 'ws:')}/v1/runmesh/connect`, deviceAuth);
    sockets.push(dev.ws);
    const echoClient = await Reader.open(echo.url);
    sockets.push(echoClient.ws);

    // Run messages on the device socket, with their arrival times, by run id.
    const runArrivals = new Map<string, { at: number; run: { rolloutId: string } }>();
    const runWaiters = new Map<string, () => void>();
    dev.ws.on('message', (data) => {
      const at = performance.now();
      const m = JSON.parse(String(data)) as { type: string; run: { runId: string; rolloutId: string } };
      if (m.type !== 'run') return;
      runArrivals.set(m.run.runId, { at, run: m.run });
      runWaiters.get(m.run.runId)?.();
    });
    /** When the run message arrived (it can arrive before the POST's answer). */
    const runArrival = async (runId: string) => {
      if (!runArrivals.has(runId))
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`run ${runId} not delivered within 10 s`)), 10_000);
          runWaiters.set(runId, () => {
            clearTimeout(timer);
            resolve();
          });
        });
      runWaiters.delete(runId);
      const a = runArrivals.get(runId)!;
      runArrivals.delete(runId);
      return a;
    };

    // The run the device holds for (2), and a subscriber of its thread.
    const held = await api(h, 'POST', '/v1/run', { agent: 'local', prompt: 'hold' });
    const delivered = (await runArrival(held.runId)).run;
    dev.ws.send(JSON.stringify({ type: 'accept', runId: held.runId }));
    for (let i = 0; ; i++) {
      if ((await api(h, 'GET', `/v1/runs/${held.runId}`)).status === 'running') break;
      if (i > 200) throw new Error('the held run did not become running');
      await new Promise((r) => setTimeout(r, 10));
    }
    const rolloutId = delivered.rolloutId;
    const sub = await Reader.open(`${h.url.replace('http:', 'ws:')}/v1/threads/${held.threadId}/events?api_key=${encodeURIComponent(h.apiKey)}`);
    sockets.push(sub.ws);
    // Connected once the snapshot has arrived (the socket has joined the thread's hub then).
    for (let i = 0; !sub.received.some((t) => t.includes('"snapshot"')); i++) {
      if (i > 500) throw new Error('no snapshot on the thread socket');
      await new Promise((r) => setTimeout(r, 10));
    }
    sub.clear();

    const echoPayload = (tag: string) =>
      JSON.stringify({
        type: 'assistant_message_delta',
        runId: held.runId,
        rolloutId,
        sequenceNumber: 1,
        messageId: 'msg_bench',
        delta: tag + FILLER.slice(tag.length),
      });
    let tagNo = 0;
    let durableSeq = 0;
    const postFrame = (frame: Record<string, unknown>) =>
      fetch(`${h.url}/v1/thread-events`, {
        method: 'POST',
        headers: { ...deviceAuth, 'content-type': 'application/json' },
        body: JSON.stringify({ threadId: held.threadId, frame }),
      }).then(async (res) => {
        const text = await res.text();
        if (res.status >= 300) throw new Error(`POST /v1/thread-events: ${res.status} ${text.slice(0, 300)}`);
      });

    /** One sample of a target, ms. */
    const once: Record<Target, () => Promise<number>> = {
      async echo() {
        const tag = `e${++tagNo}:`;
        const t0 = performance.now();
        const got = echoClient.wait(tag);
        echoClient.ws.send(echoPayload(tag));
        return (await got) - t0;
      },
      async dispatch() {
        const t0 = performance.now();
        const res = await fetch(`${h.url}/v1/run`, {
          method: 'POST',
          headers: { 'x-api-key': h.apiKey, 'content-type': 'application/json' },
          body: JSON.stringify({ agent: 'local', prompt: 'bench' }),
        });
        const text = await res.text();
        const answered = performance.now();
        if (res.status !== 200) throw new Error(`POST /v1/run: ${res.status} ${text.slice(0, 300)}`);
        const { runId, status } = JSON.parse(text).data as { runId: string; status: string };
        if (status !== 'registered') throw new Error(`POST /v1/run answered ${status}`);
        answers.push(answered - t0);
        // The run message can arrive before the POST's answer: look in what arrived first.
        const { at } = await runArrival(runId);
        if (at < answered) beforeAnswer++;
        const cancelled = await api(h, 'POST', `/v1/runs/${runId}/cancel`, {});
        if (cancelled.status !== 'cancelled') throw new Error(`cancel ${runId}: ${cancelled.status}`);
        return at - t0;
      },
      async transient() {
        const tag = `t${++tagNo}:`;
        const got = sub.wait(tag);
        const t0 = performance.now();
        await postFrame({
          type: 'assistant_message_delta',
          runId: held.runId,
          rolloutId,
          sequenceNumber: 1,
          messageId: 'msg_bench',
          delta: tag + FILLER.slice(tag.length),
        });
        return (await got) - t0;
      },
      async durable() {
        const tag = `d${++tagNo}:`;
        const got = sub.wait(tag);
        const t0 = performance.now();
        await postFrame({ type: 'assistant_message', runId: held.runId, rolloutId, sequenceNumber: ++durableSeq, payload: { text: tag + FILLER } });
        return (await got) - t0;
      },
    };
    // POST /v1/run's answer time, and how many run messages reached the device before it (within the dispatch samples).
    const answers: number[] = [];
    let beforeAnswer = 0;
    const targets: Target[] = ['echo', 'dispatch', 'transient', 'durable'];
    const samples: Record<Target, number[]> = { echo: [], dispatch: [], transient: [], durable: [] };
    console.log(
      `${counts.dispatch} dispatches (a new thread each, cancelled after delivery), ${counts.transient} transient and ${counts.durable} durable frames, ` +
        `${counts.echo} bare echoes; one at a time, ${rounds} rounds ABBA after ${WARMUP} warm-ups of each`,
    );
    for (const t of targets) for (let i = 0; i < WARMUP; i++) await once[t]();
    answers.length = 0;
    beforeAnswer = 0;
    const t0 = performance.now();
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? targets : [...targets].reverse();
      for (const t of order) {
        const n = Math.ceil(counts[t] / rounds) - (round === rounds - 1 ? Math.ceil(counts[t] / rounds) * rounds - counts[t] : 0);
        for (let i = 0; i < n; i++) {
          samples[t].push(await once[t]());
          // Unclaimed messages (cancels on the device socket; run_started, user_message, run_completed on none here).
          if (dev.received.length > 100) dev.clear();
          if (sub.received.length > 100) sub.clear();
        }
      }
    }
    const seconds = (performance.now() - t0) / 1000;
    // No run piled up: every dispatched run was cancelled, only the held one is live.
    const live = await h.deps.db.kysely
      .selectFrom('agent_runs')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('status', 'in', ['registered', 'running'])
      .executeTakeFirstOrThrow();
    if (Number(live.n) !== 1) throw new Error(`${live.n} runs still registered or running (expected only the held one)`);
    await api(h, 'POST', `/v1/runs/${held.runId}/cancel`, {});

    const stat = (t: Target) => {
      const s = [...samples[t]].sort((a, b) => a - b);
      return { n: s.length, p50: percentile(s, 50), p90: percentile(s, 90), p99: percentile(s, 99), max: s[s.length - 1]! };
    };
    const base = stat('echo');
    const answerSorted = [...answers].sort((a, b) => a - b);
    const rows = targets.map((t) => {
      const s = stat(t);
      return [
        LABEL[t],
        s.n,
        s.p50.toFixed(2),
        s.p90.toFixed(2),
        s.p99.toFixed(2),
        s.max.toFixed(1),
        t === 'echo' ? '' : `x${(s.p50 / base.p50).toFixed(1)}`,
        t === 'echo' ? '' : `x${(s.p99 / base.p99).toFixed(1)}`,
      ];
    });
    rows.splice(2, 0, [
      '    POST /v1/run answered (registered)',
      answers.length,
      percentile(answerSorted, 50).toFixed(2),
      percentile(answerSorted, 90).toFixed(2),
      percentile(answerSorted, 99).toFixed(2),
      answerSorted[answerSorted.length - 1]!.toFixed(1),
      '',
      '',
    ]);
    console.log('');
    console.log(table(['target', 'n', 'median ms', 'p90 ms', 'p99 ms', 'max ms', 'vs bare (median)', 'vs bare (p99)'], rows));
    console.log(
      `(measured in ${seconds.toFixed(1)} s; ${beforeAnswer} of ${answers.length} run messages reached the device before POST /v1/run's answer)`,
    );
    console.log('');
    const lines = (['dispatch', 'transient', 'durable'] as const).map((t) => {
      const s = stat(t);
      return `${t} median ${s.p50.toFixed(2)} ms = ${(s.p50 / base.p50).toFixed(1)}x a bare WebSocket round trip (p99 ${s.p99.toFixed(2)} ms = ${(s.p99 / base.p99).toFixed(1)}x)`;
    });
    for (const l of lines) console.log(l);
    const d = stat('dispatch');
    const tr = stat('transient');
    const du = stat('durable');
    const x = (v: number) => (v / base.p50).toFixed(1);
    return (
      `mesh: dispatch median ${d.p50.toFixed(2)} ms (x${x(d.p50)}, p99 ${d.p99.toFixed(1)}), transient frame ${tr.p50.toFixed(2)} ms (x${x(tr.p50)}, p99 ${tr.p99.toFixed(1)}), ` +
      `durable frame ${du.p50.toFixed(2)} ms (x${x(du.p50)}, p99 ${du.p99.toFixed(1)}); bare ws echo ${base.p50.toFixed(3)} ms (p99 ${base.p99.toFixed(2)})`
    );
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
  }
}
