/**
 * `forwarding`: what a hop between replicas costs (ADR 0024). Two Hangar nodes run in this process on one PostgreSQL
 * schema and Redis (as src/domains/sandboxes/sandboxes-nodes.test.ts builds them); a sandbox lives on B. Measured,
 * ABBA-interleaved over real HTTP on loopback with one keep-alive client:
 *   (a) baseline: POST /v1/sandboxes/{id}/commands `{ cmd: 'true' }` sent to B, the sandbox's node;
 *   (b) the same request sent to A, which forwards it to B (signed hop, new connection, both bodies streamed).
 * Prints medians and p90 of both and the ratio b/a. Needs root, runc, the sandbox agent, PostgreSQL and Redis
 * (HANGAR_TEST_DATABASE_URL, HANGAR_TEST_REDIS_URL or the local defaults).
 *
 * Options: --requests=N per target (default 200).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { buildApp, closeDeps, createDeps } from '../src/app.js';
import { parseConfig } from '../src/config.js';
import { bootstrapOrganization } from '../src/domains/organizations/index.js';
import { liveNodes } from '../src/platform/nodes/index.js';
import type { Deps } from '../src/platform/context.js';
import type { App } from '../src/platform/http/server.js';
import type { BenchOutcome } from './lib/results.js';

export const description = 'a sandbox command sent to a replica that forwards it to the sandbox’s node vs sent to that node';

const PG_URL = process.env.HANGAR_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = process.env.HANGAR_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function post(url: string, key: string, body: unknown): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const data = Buffer.from(JSON.stringify(body));
    const req = http.request(
      url,
      { method: 'POST', agent, headers: { 'x-api-key': key, 'content-type': 'application/json', 'content-length': data.length } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil(0.9 * xs.length) - 1)]!;

export async function run(argv: string[]): Promise<BenchOutcome> {
  const { values } = parseArgs({ args: argv, options: { requests: { type: 'string', default: '200' } }, strict: true });
  const n = Number(values.requests);
  const schema = `bench_${randomBytes(6).toString('hex')}`;
  const secret = randomBytes(32).toString('hex');
  const dirs: string[] = [];
  const nodes: Array<{ deps: Deps; app: App; url: string }> = [];
  try {
    for (const [id, octet] of [
      ['bench-a', 93],
      ['bench-b', 94],
    ] as const) {
      const dataDir = mkdtempSync(path.join(tmpdir(), `hangar-${id}-`));
      dirs.push(dataDir);
      const sandboxDir = `/var/lib/hangar/sbx-${id.slice(-1)}`;
      mkdirSync(sandboxDir, { recursive: true });
      const deps = await createDeps(
        parseConfig({
          DATABASE_URL: `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}schema=${schema}`,
          REDIS_URL,
          HANGAR_SECRET_KEY: secret,
          HANGAR_NODE_ID: id,
          HANGAR_DATA_DIR: dataDir,
          HANGAR_SANDBOX_DIR: sandboxDir,
          HANGAR_SANDBOX_SUBNET: `10.${octet}.0.0/16`,
          HANGAR_TEMPLATE_PREBUILD: 'false',
          LOG_LEVEL: 'silent',
        }),
      );
      const app = await buildApp(deps);
      nodes.push({ deps, app, url: await app.listen({ host: '127.0.0.1', port: 0 }) });
    }
    const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
    if (!b.deps.sandboxes.available) throw new Error(`sandboxes are unavailable: ${b.deps.sandboxes.unavailableReason}`);
    for (let i = 0; i < 200 && (await liveNodes(a.deps)).length < 2; i++) await new Promise((r) => setTimeout(r, 50));
    const { key } = await bootstrapOrganization(a.deps, { email: 'bench@example.test', name: 'Bench', orgName: 'Bench', keyName: 'bench' });
    const created = await post(`${b.url}/v1/sandboxes`, key.key, { network: false });
    if (created.status !== 201) throw new Error(`create: ${created.status} ${created.body}`);
    const box = JSON.parse(created.body).data as { id: string; nodeId: string };
    if (box.nodeId !== 'bench-b') throw new Error(`the sandbox went to ${box.nodeId}`);
    const once = async (base: string) => {
      const t0 = performance.now();
      const res = await post(`${base}/v1/sandboxes/${box.id}/commands`, key.key, { cmd: 'true' });
      if (res.status !== 200) throw new Error(`${res.status} ${res.body}`);
      return performance.now() - t0;
    };
    for (let i = 0; i < 10; i++) {
      await once(b.url); // warm-up
      await once(a.url);
    }
    const direct: number[] = [];
    const forwarded: number[] = [];
    for (let i = 0; i < n; i++) {
      // ABBA
      if (i % 2 === 0) {
        direct.push(await once(b.url));
        forwarded.push(await once(a.url));
      } else {
        forwarded.push(await once(a.url));
        direct.push(await once(b.url));
      }
    }
    const fmt = (x: number) => `${x.toFixed(2)} ms`;
    console.log(`direct to the node   median ${fmt(median(direct))}  p90 ${fmt(p90(direct))}`);
    console.log(`forwarded via A      median ${fmt(median(forwarded))}  p90 ${fmt(p90(forwarded))}`);
    const ratio = median(forwarded) / median(direct);
    console.log(`ratio forwarded/direct ${ratio.toFixed(2)} (+${fmt(median(forwarded) - median(direct))} per hop)`);
    return {
      summary: `forwarding: exec median ${fmt(median(forwarded))} forwarded vs ${fmt(median(direct))} direct, ratio ${ratio.toFixed(2)}`,
      figures: {
        'direct.median_ms': median(direct),
        'forwarded.median_ms': median(forwarded),
        'forwarded.added_ms': median(forwarded) - median(direct),
        'forwarded.latency_ratio': ratio,
      },
    };
  } finally {
    for (const node of nodes)
      for (const id of (await node.deps.sandboxes.list().catch(() => new Map())).keys()) await node.deps.sandboxes.destroy(id).catch(() => undefined);
    for (const node of nodes) {
      await node.app.close().catch(() => undefined);
      await node.deps.sandboxes.removeInstallation().catch(() => undefined);
      await closeDeps(node.deps).catch(() => undefined);
    }
    agent.destroy();
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
}
