/**
 * `channels`: messaging channels (ADR 0030) at the wire, on the embedded SQLite default, everything in this process
 * (Hangar built as test/harness.ts does, the chat-bot provider `test/fakes/chatbot.ts` and the model
 * `test/fakes/openai.ts` on loopback, the load generator, the baseline servers).
 *   Setup: an agent `{ model: 'm1' }`, a secret holding the bot token, a `chatbot_provider` channel (`byok`) for it,
 *   its webhook registered over the socket (`POST /v1/agent-channels/{id}/register-webhook`, so the fake holds
 *   Hangar's webhook URL and the secret token it generated).
 *   (1) webhook acknowledgement: Telegram-format updates (a text message, a new `update_id` each, one private chat)
 *       POSTed to `/v1/agent-channels/{id}/webhook` with `X-Telegram-Bot-Api-Secret-Token`, open loop at `--rate`
 *       per second for `--seconds` per round, over a keep-alive undici Pool. Latency = from sending the request to
 *       reading the full response (200, `accepted: 1`). The channel's privacy is `mode: 'disabled'` in this phase,
 *       so the asynchronous processing each message starts (in the same process, competing for the same event
 *       loop) does the least: claim, decide (privacy disabled), finish as ignored; no model runs, nothing is sent.
 *       Baseline: a bare Fastify app in this process on loopback, one POST route taking the JSON body raw (a buffer
 *       parser, as Hangar's webhook route does) and answering 200 `{ ok: true }`, hit with the same bodies, the
 *       same way, at the same rate. After each round the benchmark waits for processing to drain (no message
 *       `received` or `processing`), and at the end counts the stored messages: every acknowledged update must be
 *       stored once and settled `ignored`/`privacy_disabled`.
 *   (2) message to reply: privacy `open`, the fake model answering "ok" at once. One message at a time (a new
 *       `update_id`, another private chat, so one conversation and one thread), from POSTing the update to the fake
 *       chat-bot provider receiving the `sendMessage` reply (`FakeChatbot.waitForSent`); the message is then left
 *       to settle (`replied`, not timed) before the next. Baseline: `POST /v1/run { agent, prompt, threadId }` over
 *       the same keep-alive HTTP (one thread continued, as the channel continues its conversation's thread), from
 *       sending to the full response (`completed`, "ok").
 * Rounds alternate the order of the targets (ABBA) after a warm-up of each.
 * Options: --rate N (updates/s, 200), --seconds N (per round and target, 10), --warmup N (seconds of each, 2),
 * --connections N (keep-alive sockets of the load generator, 16), --replies N (50, after 5 warm-ups of each),
 * --runs N (direct runs, same as --replies), --rounds N (2).
 */
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import Fastify, { type FastifyInstance } from 'fastify';
import { Pool } from 'undici';
import { FakeChatbot } from '../test/fakes/chatbot.js';
import { FakeOpenAI } from '../test/fakes/openai.js';
import { startInProcessHangar, stopInProcessHangar, type InProcessHangar } from './lib/in-process.js';
import { type LoadResult, openLoop, table } from './lib/load.js';

export const description = 'messaging channels: webhook acknowledgement under open-loop load vs bare Fastify; message -> reply vs POST /v1/run';

const TOKEN = '7001:AAbenchBotToken';
const LOAD_CHAT = 5_100_001;
const REPLY_CHAT = 5_100_002;
const REPLY_WARMUP = 5;
const AIM_ADDED_MEDIAN_MS = 3;

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

function positive(name: string, v: string | undefined): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer`);
  return n;
}

const signed = (v: number) => `${v >= 0 ? '+' : ''}${v.toFixed(2)}`;

function stats(samples: number[]) {
  const s = [...samples].sort((a, b) => a - b);
  return { n: s.length, p50: percentile(s, 50), p90: percentile(s, 90), p99: percentile(s, 99), max: s.length ? s[s.length - 1]! : NaN };
}

async function api(h: InProcessHangar, method: string, path: string, body?: unknown) {
  const res = await fetch(`${h.url}${path}`, {
    method,
    headers: { 'x-api-key': h.apiKey, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
  return JSON.parse(text).data;
}

async function startBare(): Promise<{ app: FastifyInstance; url: string }> {
  const app = Fastify({ logger: false });
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  app.post('/webhook', async () => ({ ok: true }));
  await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` };
}

type LoadTarget = 'bare' | 'hangar';
type ReplyTarget = 'run' | 'channel';

export async function run(argv: string[]): Promise<string> {
  const { values } = parseArgs({
    args: argv,
    options: {
      rate: { type: 'string', default: '200' },
      seconds: { type: 'string', default: '10' },
      warmup: { type: 'string', default: '2' },
      connections: { type: 'string', default: '16' },
      replies: { type: 'string', default: '50' },
      runs: { type: 'string' },
      rounds: { type: 'string', default: '2' },
    },
    strict: true,
  });
  const rate = positive('rate', values.rate);
  const seconds = positive('seconds', values.seconds);
  const warmup = positive('warmup', values.warmup);
  const connections = positive('connections', values.connections);
  const replies = positive('replies', values.replies);
  const runs = positive('runs', values.runs ?? values.replies);
  const rounds = positive('rounds', values.rounds);

  let hangar: InProcessHangar | undefined;
  let model: FakeOpenAI | undefined;
  let bot: FakeChatbot | undefined;
  let bare: Awaited<ReturnType<typeof startBare>> | undefined;
  const pools: Pool[] = [];
  const cleanup = async () => {
    for (const p of pools.splice(0)) await p.close().catch(() => undefined);
    await bare?.app.close().catch(() => undefined);
    bare = undefined;
    if (hangar) await stopInProcessHangar(hangar).catch((err) => console.error(`channels: Hangar cleanup failed: ${(err as Error).message}`));
    hangar = undefined;
    await model?.stop().catch(() => undefined);
    model = undefined;
    await bot?.close().catch(() => undefined);
    bot = undefined;
  };
  const onSignal = () => {
    void cleanup().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  try {
    process.stdout.write('starting Hangar (in process), the fake model and chat-bot providers and the bare Fastify app... ');
    model = await new FakeOpenAI().start();
    bot = await FakeChatbot.start();
    bot.addBot(TOKEN, { id: 7001, username: 'bench_bot', firstName: 'Bench' });
    hangar = await startInProcessHangar('channels', {
      HANGAR_OPENAI_BASE_URL: model.url,
      HANGAR_OPENAI_API_KEY: 'sk-bench',
      HANGAR_OPENAI_MODELS: 'm1',
      HANGAR_CHANNELS_CHATBOT_API_URL: bot.url,
    });
    bare = await startBare();
    const h = hangar;
    const fakeBot = bot;
    console.log(`Hangar on ${h.url}`);

    await api(h, 'POST', '/v1/agents', { slug: 'helper', model: 'm1', instructions: 'Be brief.' });
    await api(h, 'POST', '/v1/secrets', { name: 'BENCH_BOT_TOKEN', value: TOKEN });
    const channel = await api(h, 'POST', '/v1/agent-channels', {
      agent: 'helper',
      provider: 'chatbot_provider',
      mode: 'byok',
      botTokenSecretName: 'BENCH_BOT_TOKEN',
    });
    const channelId = channel.id as string;
    const registered = await api(h, 'POST', `/v1/agent-channels/${channelId}/register-webhook`);
    const hook = fakeBot.webhookOf(TOKEN);
    if (!registered.registered || !hook?.secretToken) throw new Error('the webhook was not registered at the fake provider');
    const webhookPath = new URL(hook.url).pathname;
    if (webhookPath !== `/v1/agent-channels/${channelId}/webhook`) throw new Error(`unexpected webhook URL ${hook.url}`);
    const secretToken = hook.secretToken;

    const hangarPool = new Pool(h.url, { connections, pipelining: 1 });
    const barePool = new Pool(bare.url, { connections, pipelining: 1 });
    pools.push(hangarPool, barePool);

    const update = (chatId: number, text: string) => JSON.stringify(fakeBot.privateText({ fromId: chatId, firstName: 'Ada', text }));
    let acked = 0;
    const sendOnce: Record<LoadTarget, () => Promise<number | null>> = {
      async bare() {
        const body = update(LOAD_CHAT, 'hello there');
        const t0 = performance.now();
        const res = await barePool.request({ path: '/webhook', method: 'POST', headers: { 'content-type': 'application/json' }, body });
        const text = await res.body.text();
        const ms = performance.now() - t0;
        return res.statusCode === 200 && text === '{"ok":true}' ? ms : null;
      },
      async hangar() {
        const body = update(LOAD_CHAT, 'hello there');
        const t0 = performance.now();
        const res = await hangarPool.request({
          path: webhookPath,
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-telegram-bot-api-secret-token': secretToken },
          body,
        });
        const text = await res.body.text();
        const ms = performance.now() - t0;
        if (res.statusCode !== 200 || JSON.parse(text).data?.accepted !== 1) return null;
        acked++;
        return ms;
      },
    };

    const countMessages = async (where: 'all' | 'pending') => {
      let q = h.deps.db.kysely
        .selectFrom('channel_messages')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('channel_id', '=', channelId);
      if (where === 'pending') q = q.where('status', 'in', ['received', 'processing']);
      return Number((await q.executeTakeFirstOrThrow()).n);
    };
    /** Waits for the asynchronous processing to settle every stored message; answers how long it took (ms). */
    const drain = async () => {
      const t0 = performance.now();
      for (;;) {
        if ((await countMessages('pending')) === 0) return performance.now() - t0;
        if (performance.now() - t0 > 120_000) throw new Error(`messages still pending after 120 s: ${await countMessages('pending')}`);
        await sleep(20);
      }
    };

    // ---- (1) webhook acknowledgement under open-loop load, privacy disabled
    const privacy = await api(h, 'PATCH', `/v1/agent-channels/${channelId}/privacy`, { mode: 'disabled' });
    if (privacy.mode !== 'disabled') throw new Error(`privacy answered ${privacy.mode}`);
    console.log(
      `(1) webhook acknowledgement: open loop at ${rate}/s for ${seconds} s per round and target, ${rounds} rounds ABBA after ${warmup} s of each; ` +
        `${connections} keep-alive sockets; privacy mode 'disabled' (processing = claim, decide, finish as ignored; no model, nothing sent)`,
    );
    const loadTargets: LoadTarget[] = ['bare', 'hangar'];
    const loads: Record<LoadTarget, LoadResult[]> = { bare: [], hangar: [] };
    const drains: number[] = [];
    for (const t of loadTargets) {
      const w = await openLoop(sendOnce[t], rate, warmup);
      if (w.failed) throw new Error(`${t}: ${w.failed} failed requests during the warm-up`);
    }
    drains.push(await drain());
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? loadTargets : [...loadTargets].reverse();
      for (const t of order) {
        const r = await openLoop(sendOnce[t], rate, seconds);
        loads[t].push(r);
        if (t === 'hangar') drains.push(await drain());
      }
    }
    const stored = await countMessages('all');
    const settled = await h.deps.db.kysely
      .selectFrom('channel_messages')
      .select(['status', 'outcome', (eb) => eb.fn.countAll<number>().as('n')])
      .where('channel_id', '=', channelId)
      .groupBy(['status', 'outcome'])
      .execute();
    const byOutcome = settled.map((r) => `${Number(r.n)} ${r.status}/${r.outcome ?? '-'}`).join(', ');
    const lost = acked - stored;
    const listed = (await api(h, 'GET', `/v1/agent-channels/${channelId}/messages?limit=5`)).messages as unknown[];
    if (listed.length === 0) throw new Error('GET …/messages lists none');

    const loadStat = (t: LoadTarget) => {
      const all = loads[t].flatMap((r) => r.latencies);
      const secs = loads[t].reduce((s, r) => s + r.seconds, 0);
      return {
        ...stats(all),
        rps: all.length / secs,
        failed: loads[t].reduce((s, r) => s + r.failed, 0),
        maxLag: Math.max(...loads[t].map((r) => r.maxLag)),
      };
    };
    const b = loadStat('bare');
    const hg = loadStat('hangar');
    const addedMedian = hg.p50 - b.p50;
    const verdict = addedMedian < AIM_ADDED_MEDIAN_MS ? 'PASS' : 'MISS';
    console.log('');
    console.log(
      table(
        ['target', 'n', 'req/s', 'failed', 'median ms', 'p90 ms', 'p99 ms', 'max ms', 'max send lag ms'],
        [
          [
            'bare Fastify POST (raw body) -> 200',
            b.n,
            b.rps.toFixed(0),
            b.failed,
            b.p50.toFixed(2),
            b.p90.toFixed(2),
            b.p99.toFixed(2),
            b.max.toFixed(1),
            b.maxLag.toFixed(1),
          ],
          [
            'Hangar webhook (verify, store) -> 200',
            hg.n,
            hg.rps.toFixed(0),
            hg.failed,
            hg.p50.toFixed(2),
            hg.p90.toFixed(2),
            hg.p99.toFixed(2),
            hg.max.toFixed(1),
            hg.maxLag.toFixed(1),
          ],
        ],
      ),
    );
    console.log(
      `added median ${addedMedian.toFixed(2)} ms (x${(hg.p50 / b.p50).toFixed(1)} the bare median; p90 ${signed(hg.p90 - b.p90)}, p99 ${signed(hg.p99 - b.p99)} ms): ` +
        `${verdict} against the aim of < ${AIM_ADDED_MEDIAN_MS} ms`,
    );
    const perRound = (t: LoadTarget) => loads[t].map((r) => stats(r.latencies).p50.toFixed(2)).join(' / ');
    console.log(`medians per round (ms): bare ${perRound('bare')}; Hangar ${perRound('hangar')}`);
    console.log(
      `stored: ${stored} messages for ${acked} acknowledged updates (warm-up included; ${lost === 0 ? 'none lost' : `${lost} LOST`}): ${byOutcome}; ` +
        `processing drained ${drains.map((d) => `${d.toFixed(0)} ms`).join(', ')} after the warm-up and each Hangar round`,
    );
    if (lost !== 0 || stored !== acked) throw new Error(`${acked} updates acknowledged but ${stored} messages stored`);

    // ---- (2) message -> reply, privacy open, instant model
    await api(h, 'PATCH', `/v1/agent-channels/${channelId}/privacy`, { mode: 'open' });
    const first = await api(h, 'POST', '/v1/run', { agent: 'helper', prompt: 'hello there' });
    const threadId = first.threadId as string;
    console.log('');
    console.log(
      `(2) message -> reply: privacy 'open', the fake model answering "ok" at once; ${replies} messages (one private chat, one at a time, each settled ` +
        `before the next) and ${runs} direct POST /v1/run (one thread continued), ${rounds} rounds ABBA after ${REPLY_WARMUP} warm-ups of each`,
    );
    const ackTimes: number[] = [];
    const replyOnce: Record<ReplyTarget, () => Promise<number>> = {
      async channel() {
        const n = fakeBot.sent.length;
        const body = update(REPLY_CHAT, 'hello there');
        const t0 = performance.now();
        const got = fakeBot.waitForSent(n + 1, () => true, 30_000);
        const res = await hangarPool.request({
          path: webhookPath,
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-telegram-bot-api-secret-token': secretToken },
          body,
        });
        const text = await res.body.text();
        ackTimes.push(performance.now() - t0);
        if (res.statusCode !== 200) throw new Error(`webhook: ${res.statusCode} ${text.slice(0, 300)}`);
        const sent = await got;
        const ms = performance.now() - t0;
        const reply = sent[n]!;
        if (reply.chatId !== String(REPLY_CHAT) || reply.text !== 'ok') throw new Error(`unexpected reply ${JSON.stringify(reply)}`);
        await drain();
        return ms;
      },
      async run() {
        const body = JSON.stringify({ agent: 'helper', prompt: 'hello there', threadId });
        const t0 = performance.now();
        const res = await hangarPool.request({
          path: '/v1/run',
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-api-key': h.apiKey },
          body,
        });
        const text = await res.body.text();
        const ms = performance.now() - t0;
        if (res.statusCode !== 200) throw new Error(`POST /v1/run: ${res.statusCode} ${text.slice(0, 300)}`);
        const r = JSON.parse(text).data as { status: string; result: unknown };
        if (r.status !== 'completed' || r.result !== 'ok') throw new Error(`POST /v1/run answered ${r.status} ${JSON.stringify(r.result)}`);
        return ms;
      },
    };
    const replyTargets: ReplyTarget[] = ['run', 'channel'];
    const counts: Record<ReplyTarget, number> = { run: runs, channel: replies };
    const replySamples: Record<ReplyTarget, number[]> = { run: [], channel: [] };
    for (const t of replyTargets) for (let i = 0; i < REPLY_WARMUP; i++) await replyOnce[t]();
    ackTimes.length = 0;
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? replyTargets : [...replyTargets].reverse();
      for (const t of order) {
        const per = Math.ceil(counts[t] / rounds);
        const n = round === rounds - 1 ? counts[t] - per * (rounds - 1) : per;
        for (let i = 0; i < n; i++) replySamples[t].push(await replyOnce[t]());
      }
    }
    const replied = await h.deps.db.kysely
      .selectFrom('channel_messages')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('channel_id', '=', channelId)
      .where('status', '=', 'replied')
      .executeTakeFirstOrThrow();
    const rn = stats(replySamples.run);
    const ch = stats(replySamples.channel);
    const ack = stats(ackTimes);
    const row = (label: string, s: ReturnType<typeof stats>) => [label, s.n, s.p50.toFixed(2), s.p90.toFixed(2), s.p99.toFixed(2), s.max.toFixed(1)];
    console.log('');
    console.log(
      table(
        ['target', 'n', 'median ms', 'p90 ms', 'p99 ms', 'max ms'],
        [
          row('POST /v1/run -> completed answer', rn),
          row('channel: webhook POST -> sendMessage at the provider', ch),
          row('    webhook acknowledged (200)', ack),
        ],
      ),
    );
    const addedReply = ch.p50 - rn.p50;
    console.log(
      `the channel path adds ${addedReply.toFixed(2)} ms at the median over a plain run (x${(ch.p50 / rn.p50).toFixed(1)}; p99 ${signed(ch.p99 - rn.p99)} ms); ` +
        `${Number(replied.n)} messages replied`,
    );

    return (
      `channels: webhook ack at ${rate}/s median ${hg.p50.toFixed(2)} ms vs bare ${b.p50.toFixed(2)} (added ${addedMedian.toFixed(2)} ms, ${verdict} < ${AIM_ADDED_MEDIAN_MS}; ` +
      `p99 ${hg.p99.toFixed(1)} vs ${b.p99.toFixed(1)}), ${stored}/${acked} stored; message -> reply median ${ch.p50.toFixed(2)} ms ` +
      `(p99 ${ch.p99.toFixed(1)}) vs POST /v1/run ${rn.p50.toFixed(2)} ms (p99 ${rn.p99.toFixed(1)})`
    );
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
  }
}
