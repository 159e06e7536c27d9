import WebSocket from 'ws';
import { DeviceApi } from './api.js';
import type { DeviceConfig } from './config.js';
import { WorkspaceHost } from './host.js';
import { type DeviceRun, type RunEnd, runDeviceRun } from './loop.js';

export interface RunnerOptions {
  config: Pick<DeviceConfig, 'url' | 'deviceToken'>;
  /** The workspace folder the tools act in. */
  workspace: string;
  /** host:port values reported in each heartbeat (where peers can reach this device). */
  endpoints: string[];
  /** Stop after the first run finishes. */
  once?: boolean;
  /** Stops the runner (and the run it is doing). */
  signal: AbortSignal;
  log: (line: string) => void;
  /** Reconnect backoff bounds (default 500 ms .. 10 s). */
  backoffMs?: { min: number; max: number };
}

/** The server closed the socket with 4401: the credential is revoked or invalid. */
export class RevokedError extends Error {}

type ServerMessage =
  | { type: 'hello'; nodeId: string; heartbeatSeconds: number }
  | { type: 'run'; run: DeviceRun }
  | { type: 'cancel'; runId: string; reason?: string };

/**
 * `hangar device run`: holds the dispatch WebSocket (reconnecting with capped exponential backoff), heartbeats,
 * accepts runs and does them one at a time in arrival order (a queue: simple, and a device rarely has two at
 * once). A run id is taken once, however often the server re-sends it. Resolves when stopped (signal, or `once`
 * after the first run); rejects with RevokedError on close code 4401.
 */
export async function runDevice(opts: RunnerOptions): Promise<void> {
  const { min, max } = opts.backoffMs ?? { min: 500, max: 10_000 };
  const wsUrl = new URL('/v1/runmesh/connect', opts.config.url);
  wsUrl.protocol = wsUrl.protocol === 'https:' ? 'wss:' : 'ws:';
  const api = new DeviceApi({ url: opts.config.url, token: opts.config.deviceToken });

  /** Every run id this device took (queued, running or done): never started twice. */
  const taken = new Set<string>();
  const queue: DeviceRun[] = [];
  let active: { runId: string; controller: AbortController } | null = null;
  const cancelled = new Set<string>();
  let socket: WebSocket | null = null;
  let finished = false;
  let wake: (() => void) | null = null;

  const done = new AbortController(); // stops everything: the caller's signal, `once`, or a revocation
  let failure: Error | null = null;
  const stop = (err?: Error) => {
    if (err && !failure) failure = err;
    finished = true;
    done.abort();
    active?.controller.abort('the device is stopping');
    socket?.close(1000);
    wake?.();
  };
  if (opts.signal.aborted) return;
  opts.signal.addEventListener('abort', () => stop(), { once: true });

  const send = (msg: unknown) => {
    if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify(msg));
  };

  const onMessage = (msg: ServerMessage) => {
    if (msg.type === 'run' && msg.run?.runId) {
      const id = msg.run.runId;
      if (taken.has(id)) {
        if (active?.runId === id) send({ type: 'accept', runId: id }); // our accept may have been lost
        return;
      }
      if ((msg.run as { resume?: boolean }).resume) {
        // The server thinks we hold this run, but this process never had it (the device restarted): doing it again
        // from the start would repeat its frames, so it is refused and the server ends it.
        send({ type: 'reject', runId: id, reason: 'the device restarted and lost this run' });
        return;
      }
      taken.add(id);
      queue.push(msg.run);
      wake?.();
    } else if (msg.type === 'cancel') {
      cancelled.add(msg.runId);
      const i = queue.findIndex((r) => r.runId === msg.runId);
      if (i >= 0) {
        queue.splice(i, 1);
        opts.log(`run ${msg.runId} cancelled before it started${msg.reason ? `: ${msg.reason}` : ''}`);
      }
      if (active?.runId === msg.runId) active.controller.abort(msg.reason ? `cancelled: ${msg.reason}` : 'cancelled');
    }
  };

  // The worker: one run at a time.
  const worker = (async () => {
    while (!finished) {
      const run = queue.shift();
      if (!run) {
        await new Promise<void>((r) => (wake = r));
        wake = null;
        continue;
      }
      if (cancelled.has(run.runId)) continue;
      const controller = new AbortController();
      active = { runId: run.runId, controller };
      send({ type: 'accept', runId: run.runId });
      opts.log(`run ${run.runId} started (agent ${run.agent?.slug ?? '?'}, thread ${run.threadId})`);
      const started = Date.now();
      let end: RunEnd;
      let host: WorkspaceHost | null = null;
      try {
        host = await WorkspaceHost.open(opts.workspace);
        const h = host;
        end = await runDeviceRun(run, { api, host: h, home: h.workspace, tmp: h.tmp, signal: controller.signal, kill: (pid) => h.kill(pid) });
      } catch (err) {
        end = { kind: 'stopped', reason: (err as Error).message };
      } finally {
        await host?.dispose(); // background processes end with their run
        active = null;
      }
      const secs = ((Date.now() - started) / 1000).toFixed(1);
      if (end.kind === 'finished')
        opts.log(`run ${run.runId} ${end.status} after ${end.iterations} turn(s) in ${secs}s${end.error ? `: ${end.error}` : ''}`);
      else opts.log(`run ${run.runId} stopped after ${secs}s: ${end.reason}`);
      if (opts.once) stop();
    }
  })();

  // The connection: connect, hold, reconnect.
  let delay = min;
  while (!finished) {
    const closed = await new Promise<{ code: number; reason: string; opened: boolean }>((resolve) => {
      let opened = false;
      let heartbeat: NodeJS.Timeout | null = null;
      const ws = new WebSocket(wsUrl, { headers: { authorization: `Bearer ${opts.config.deviceToken}` } });
      socket = ws;
      ws.on('open', () => {
        opened = true;
        delay = min;
      });
      ws.on('message', (data) => {
        let msg: ServerMessage;
        try {
          msg = JSON.parse(String(data));
        } catch {
          return;
        }
        if (msg.type === 'hello') {
          opts.log(`connected to ${opts.config.url} as ${msg.nodeId}`);
          if (heartbeat) clearInterval(heartbeat);
          const beat = () => send({ type: 'heartbeat', endpoints: opts.endpoints });
          beat();
          heartbeat = setInterval(beat, Math.max(1, Number(msg.heartbeatSeconds) || 30) * 1000);
        } else onMessage(msg);
      });
      ws.on('unexpected-response', (_req, res) => {
        // A refused upgrade: 401 is a revoked or unknown credential, like close code 4401.
        const code = res.statusCode === 401 ? 4401 : 1006;
        ws.terminate();
        resolve({ code, reason: `HTTP ${res.statusCode}`, opened });
      });
      ws.on('error', () => {}); // 'close' follows
      ws.on('close', (code, reason) => {
        if (heartbeat) clearInterval(heartbeat);
        resolve({ code, reason: reason.toString(), opened });
      });
    });
    socket = null;
    if (finished) break;
    if (closed.code === 4401) {
      stop(
        new RevokedError('the server refused this device\u2019s credential (revoked or unknown): link it again with `hangar device link --force`'),
      );
      break;
    }
    opts.log(`disconnected (${closed.code}${closed.reason ? ` ${closed.reason}` : ''}); reconnecting in ${(delay / 1000).toFixed(1)}s`);
    await new Promise<void>((r) => {
      const t = setTimeout(r, delay);
      done.signal.addEventListener(
        'abort',
        () => {
          clearTimeout(t);
          r();
        },
        { once: true },
      );
    });
    delay = Math.min(delay * 2, max);
  }
  await worker;
  await api.close();
  if (failure) throw failure;
}
