/**
 * Load generation with autocannon, from this (the parent) process, over loopback. Latencies are
 * recorded per response at sub-millisecond resolution (autocannon's own histogram is whole ms).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import type { ServerChild } from './child.js';

export interface LoadOptions {
  connections: number;
  /** Seconds. */
  duration: number;
  headers?: Record<string, string>;
  /** Default GET. */
  method?: 'GET' | 'POST';
  body?: string;
  /** Checks each response body; a `false` counts as a mismatch (the response still counts in the latencies). */
  verifyBody?: (body: string) => boolean;
}

export interface Sample {
  requests: number;
  non2xx: number;
  errors: number;
  /** Responses `verifyBody` refused. */
  mismatches: number;
  seconds: number;
  /** Response times in ms, one per 2xx response. */
  latencies: Float64Array;
  /** CPU used by the server child and by this process (the load generator), as a share of one core. */
  serverCpu: number;
  loadgenCpu: number;
}

export async function hit(target: ServerChild, path: string, opts: LoadOptions): Promise<Sample> {
  let latencies = new Float64Array(1 << 16);
  let n = 0;
  let non2xx = 0;
  const serverCpu0 = await target.cpuMicros();
  const loadCpu0 = process.cpuUsage();
  const t0 = performance.now();
  const instance = autocannon({
    url: `${target.url}${path}`,
    connections: opts.connections,
    duration: opts.duration,
    headers: opts.headers,
    ...(opts.method ? { method: opts.method } : {}),
    ...(opts.body !== undefined ? { body: opts.body } : {}),
    ...(opts.verifyBody ? { verifyBody: (body: string | Buffer | undefined) => opts.verifyBody!(String(body ?? '')) } : {}),
  });
  // The real listener signature is (client, statusCode, resBytes, responseTime); the typings omit `client`.
  (instance as unknown as NodeJS.EventEmitter).on('response', (_client: unknown, status: number, _bytes: number, ms: number) => {
    if (status < 200 || status > 299) {
      non2xx++;
      return;
    }
    if (n === latencies.length) {
      const grown = new Float64Array(latencies.length * 2);
      grown.set(latencies);
      latencies = grown;
    }
    latencies[n++] = ms;
  });
  const result = await instance;
  const seconds = (performance.now() - t0) / 1000;
  const loadCpu = process.cpuUsage(loadCpu0);
  const serverCpu1 = await target.cpuMicros();
  return {
    requests: n,
    non2xx,
    errors: result.errors,
    mismatches: result.mismatches,
    seconds,
    latencies: latencies.slice(0, n),
    serverCpu: (serverCpu1 - serverCpu0) / 1e6 / seconds,
    loadgenCpu: (loadCpu.user + loadCpu.system) / 1e6 / seconds,
  };
}

export interface Summary {
  rps: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  requests: number;
  non2xx: number;
  errors: number;
  mismatches: number;
  serverCpu: number;
  loadgenCpu: number;
  /** Server CPU time per request, µs: less sensitive than req/s to other load on the machine. */
  serverCpuPerRequest: number;
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** Pools several samples of one target: requests over total time, percentiles over every response. */
export function summarize(samples: Sample[]): Summary {
  const total = samples.reduce((s, x) => s + x.latencies.length, 0);
  const all = new Float64Array(total);
  let at = 0;
  for (const s of samples) {
    all.set(s.latencies, at);
    at += s.latencies.length;
  }
  all.sort();
  const seconds = samples.reduce((s, x) => s + x.seconds, 0);
  const weighted = (f: (x: Sample) => number) => samples.reduce((s, x) => s + f(x) * x.seconds, 0) / seconds;
  return {
    rps: samples.reduce((s, x) => s + x.requests, 0) / seconds,
    p50: percentile(all, 50),
    p90: percentile(all, 90),
    p99: percentile(all, 99),
    max: all.length ? all[all.length - 1]! : NaN,
    requests: samples.reduce((s, x) => s + x.requests, 0),
    non2xx: samples.reduce((s, x) => s + x.non2xx, 0),
    errors: samples.reduce((s, x) => s + x.errors, 0),
    mismatches: samples.reduce((s, x) => s + x.mismatches, 0),
    serverCpu: weighted((x) => x.serverCpu),
    loadgenCpu: weighted((x) => x.loadgenCpu),
    serverCpuPerRequest: (samples.reduce((s, x) => s + x.serverCpu * x.seconds, 0) * 1e6) / Math.max(1, total),
  };
}

/** A plain fixed-width table. */
export function table(header: string[], rows: (string | number)[][]): string {
  const cells = [header, ...rows.map((r) => r.map(String))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
  const line = (r: string[]) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(cells[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.slice(1).map(line)].join('\n');
}

export interface LoadResult {
  latencies: number[];
  /** Requests that did not answer as expected. */
  failed: number;
  /** How late the sends were against the schedule (ms). */
  maxLag: number;
  seconds: number;
}

/**
 * Open loop: request i is sent at start + i / rate whatever the answers of the others (several in flight over
 * the pool's sockets); `send` resolves with the latency from its send to its full response, or null on failure.
 */
export async function openLoop(send: () => Promise<number | null>, rate: number, seconds: number): Promise<LoadResult> {
  const n = Math.max(1, Math.round(rate * seconds));
  const interval = 1000 / rate;
  const latencies: number[] = [];
  let failed = 0;
  let maxLag = 0;
  const inflight: Promise<void>[] = [];
  const t0 = performance.now() + 2;
  let i = 0;
  while (i < n) {
    const now = performance.now();
    while (i < n && t0 + i * interval <= now) {
      maxLag = Math.max(maxLag, now - (t0 + i * interval));
      inflight.push(
        send().then(
          (ms) => {
            if (ms === null) failed++;
            else latencies.push(ms);
          },
          () => {
            failed++;
          },
        ),
      );
      i++;
    }
    if (i < n) await sleep(Math.max(0, t0 + i * interval - performance.now()));
  }
  await Promise.all(inflight);
  return { latencies, failed, maxLag, seconds: (performance.now() - t0) / 1000 };
}
