import type { InjectOptions } from 'fastify';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { until } from '../../../test/helpers.js';
import { POOL_STATE, poolCounts } from './pool.js';

function call(h: Harness, actor: Actor, opts: InjectOptions) {
  return h.app.inject({ ...opts, headers: { ...actor.headers, ...(opts.headers ?? {}) } });
}

async function create(h: Harness, actor: Actor, body: Record<string, unknown> = {}) {
  const res = await call(h, actor, { method: 'POST', url: '/v1/sandboxes', payload: { network: false, ...body } });
  expect(res.statusCode, res.body).toBe(201);
  return json(res).data as { id: string; name: string; cpu: number; memoryMb: number; network: boolean; state: string; envKeys: string[] };
}

async function run(h: Harness, actor: Actor, id: string, cmd: string) {
  const res = await call(h, actor, { method: 'POST', url: `/v1/sandboxes/${id}/commands`, payload: { cmd } });
  expect(res.statusCode, res.body).toBe(200);
  return json(res).data as { exitCode: number; stdout: string; stderr: string };
}

/** Ids of the pooled sandboxes without network, ready now. */
const readyIds = (h: Harness) =>
  h.deps.state
    .get(POOL_STATE)
    .ready.filter((e) => !e.network)
    .map((e) => e.id);

/** The memory limit of a sandbox's cgroup as the host sees it (cgroup v1 or v2), in bytes. */
function memoryLimit(h: Harness, id: string): number {
  const rel = `hangar-sandboxes/${h.deps.installId}/${id}`;
  for (const file of [`/sys/fs/cgroup/memory/${rel}/memory.limit_in_bytes`, `/sys/fs/cgroup/${rel}/memory.max`]) {
    try {
      return Number(readFileSync(file, 'utf8').trim());
    } catch {
      /* the other hierarchy */
    }
  }
  throw new Error(`no memory cgroup for ${id}`);
}

describe('warm pool', () => {
  let h: Harness;
  let admin: Actor;
  let network: boolean;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_SANDBOX_POOL: '1', HANGAR_SANDBOX_POOL_MIN_FREE_MEMORY_MB: '0', LOG_LEVEL: process.env.POOL_LOG ?? 'silent' });
    admin = await createOrgAdmin(h);
    network = !h.deps.sandboxes.networkReason;
    await until('the pool', () => poolCounts(h.deps).offline === 1 && (!network || poolCounts(h.deps).network === 1), { timeoutMs: 60_000 });
  }, 90_000);
  afterAll(() => h?.close());

  it('is invisible: a new organization lists no sandboxes while the pool is full', async () => {
    expect(poolCounts(h.deps).offline).toBe(1);
    const other = await createOrgAdmin(h);
    const res = await call(h, other, { method: 'GET', url: '/v1/sandboxes' });
    expect(res.statusCode).toBe(200);
    expect(json(res).data).toEqual([]);
  });

  it('a create takes the pooled sandbox and gives it the requested env, name, limits; nothing else is left in it; the pool refills', async () => {
    const [pooled] = readyIds(h);
    const box = await create(h, admin, { env: { GREETING: 'hello-pool' }, name: 'Claimed_One', cpu: 0.5, memoryMb: 256 });
    expect(box.id).toBe(pooled);
    expect(box).toMatchObject({ name: 'Claimed_One', cpu: 0.5, memoryMb: 256, state: 'running', envKeys: ['GREETING'] });
    const out = await run(h, admin, box.id, 'echo "$GREETING $HANGAR_SANDBOX_ID"; hostname; cat /etc/hostname; id -un; ls -A /home/user | wc -l');
    expect(out.exitCode, out.stderr).toBe(0);
    const [greeting, hostname, etcHostname, user, homeEntries] = out.stdout.trim().split('\n');
    expect(greeting).toBe(`hello-pool ${box.id}`);
    expect(hostname).toBe('claimed-one');
    expect(etcHostname).toBe('claimed-one');
    expect(user).toBe('user');
    expect(homeEntries).toBe('0');
    // The agent has run nothing before this command: no process record, no log of another's command.
    const procs = await call(h, admin, { method: 'GET', url: `/v1/sandboxes/${box.id}/processes` });
    expect(procs.statusCode, procs.body).toBe(200);
    expect(json(procs).data).toHaveLength(1);
    expect(memoryLimit(h, box.id)).toBe(256 * 1024 * 1024);
    await expectActivity(h, admin, {
      resourceType: 'sandbox',
      resourceId: box.id,
      eventType: 'sandbox.created',
      metadata: { cpu: 0.5, memoryMb: 256, network: false },
    });
    const listed = await call(h, admin, { method: 'GET', url: '/v1/sandboxes' });
    expect(json(listed).data.map((s: { id: string }) => s.id)).toEqual([box.id]);
    // A claimed sandbox is never pooled again; a new one takes its place.
    await until('the pool', () => poolCounts(h.deps).offline === 1, { timeoutMs: 60_000 });
    expect(readyIds(h)).not.toContain(box.id);
    const del = await call(h, admin, { method: 'DELETE', url: `/v1/sandboxes/${box.id}` });
    expect(del.statusCode).toBe(204);
  }, 90_000);

  it('with network: the network pool gives a sandbox with eth0 up; without: only loopback', async () => {
    if (!network) return; // the host cannot give sandboxes a network (the create path answers 503 then; sandboxes.test covers it)
    const pooled = h.deps.state.get(POOL_STATE).ready.find((e) => e.network)!.id;
    const box = await create(h, admin, { network: true });
    expect(box.id).toBe(pooled);
    const out = await run(h, admin, box.id, 'ls /sys/class/net | sort | tr "\\n" " "; cat /sys/class/net/eth0/operstate');
    expect(out.stdout).toBe('eth0 lo up\n');
    await until('the pool', () => poolCounts(h.deps).offline === 1, { timeoutMs: 60_000 });
    const offline = await create(h, admin, { network: false });
    const out2 = await run(h, admin, offline.id, 'ls /sys/class/net | tr "\\n" " "');
    expect(out2.stdout).toBe('lo ');
    for (const id of [box.id, offline.id]) await call(h, admin, { method: 'DELETE', url: `/v1/sandboxes/${id}` });
  }, 120_000);

  it('concurrent creates never share a pooled sandbox: each gets its own working one', async () => {
    await until('the pool', () => poolCounts(h.deps).offline === 1, { timeoutMs: 60_000 });
    const [pooled] = readyIds(h);
    const boxes = await Promise.all([0, 1, 2].map((i) => create(h, admin, { env: { N: String(i) } })));
    expect(new Set(boxes.map((b) => b.id)).size).toBe(3);
    expect(boxes.filter((b) => b.id === pooled)).toHaveLength(1);
    for (const [i, b] of boxes.entries()) {
      expect((await run(h, admin, b.id, 'echo $N')).stdout).toBe(`${i}\n`);
      await call(h, admin, { method: 'DELETE', url: `/v1/sandboxes/${b.id}` });
    }
  }, 120_000);

  it('a request the pool cannot serve (another disk size) is built as before', async () => {
    await until('the pool', () => poolCounts(h.deps).offline === 1, { timeoutMs: 60_000 });
    const [pooled] = readyIds(h);
    const box = await create(h, admin, { diskMb: 512 });
    expect(box.id).not.toBe(pooled);
    expect(readyIds(h)).toContain(pooled);
    await call(h, admin, { method: 'DELETE', url: `/v1/sandboxes/${box.id}` });
  }, 60_000);

  it('a claimed sandbox is its organization’s: another organization gets 404 after the owner’s own request succeeds', async () => {
    await until('the pool', () => poolCounts(h.deps).offline === 1, { timeoutMs: 60_000 });
    const box = await create(h, admin);
    const own = await call(h, admin, { method: 'GET', url: `/v1/sandboxes/${box.id}` });
    expect(own.statusCode).toBe(200);
    const other = await createOrgAdmin(h);
    const res = await call(h, other, { method: 'GET', url: `/v1/sandboxes/${box.id}` });
    expect(res.statusCode).toBe(404);
    await call(h, admin, { method: 'DELETE', url: `/v1/sandboxes/${box.id}` });
  }, 60_000);

  it('pooled sandboxes give way when a create needs their memory, and the pool stops filling below the floor', async () => {
    await until('the pool', () => poolCounts(h.deps).offline === 1, { timeoutMs: 60_000 });
    const st = h.deps.state.get(POOL_STATE);
    const pooled = readyIds(h);
    const real = st.memAvailableMb;
    // As if the host had just the pool's reservation left: a new sandbox (other disk size: not from the pool) needs room.
    st.memAvailableMb = async () => st.ready.reduce((n, e) => n + e.memoryMb, 0);
    try {
      const box = await create(h, admin, { diskMb: 512 });
      expect(pooled.some((id) => readyIds(h).includes(id))).toBe(false);
      const containers = await h.deps.sandboxes.list();
      for (const id of pooled) expect(containers.has(id)).toBe(false);
      await new Promise((r) => setTimeout(r, 2_500)); // two refill rounds
      expect(poolCounts(h.deps)).toMatchObject({ offline: 0, network: 0 });
      await call(h, admin, { method: 'DELETE', url: `/v1/sandboxes/${box.id}` });
    } finally {
      st.memAvailableMb = real;
    }
    await until('the pool', () => poolCounts(h.deps).offline === 1, { timeoutMs: 60_000 });
  }, 120_000);
});

describe('warm pool and the organization limit', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness({
      HANGAR_SANDBOX_POOL: '1',
      HANGAR_SANDBOX_POOL_NETWORK: '0',
      HANGAR_SANDBOX_MAX_RUNNING: '1',
      HANGAR_SANDBOX_POOL_MIN_FREE_MEMORY_MB: '0',
    });
  });
  afterAll(() => h?.close());

  it('an organization at its limit is refused 429 also when the pool has one; the entry it took is destroyed, not pooled again', async () => {
    const admin = await createOrgAdmin(h);
    await until('the pool', () => poolCounts(h.deps).offline === 1, { timeoutMs: 60_000 });
    const first = await create(h, admin);
    await until('the pool', () => poolCounts(h.deps).offline === 1, { timeoutMs: 60_000 });
    const [pooled] = readyIds(h);
    const res = await call(h, admin, { method: 'POST', url: '/v1/sandboxes', payload: { network: false } });
    expect(res.statusCode, res.body).toBe(429);
    expect(readyIds(h)).not.toContain(pooled);
    expect((await h.deps.sandboxes.list()).has(pooled!)).toBe(false);
    const list = await call(h, admin, { method: 'GET', url: '/v1/sandboxes' });
    expect(list.statusCode, list.body).toBe(200);
    expect(json(list).data.map((s: { id: string }) => s.id)).toEqual([first.id]);
  }, 120_000);
});

describe('pool disabled (the default)', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_SANDBOX_POOL_MIN_FREE_MEMORY_MB: '0' });
  });
  afterAll(() => h?.close());

  it('keeps no pooled sandbox, and creates build one as before', async () => {
    const admin = await createOrgAdmin(h);
    await new Promise((r) => setTimeout(r, 1_500));
    expect(poolCounts(h.deps)).toEqual({ offline: 0, network: 0, building: 0 });
    expect((await h.deps.sandboxes.list()).size).toBe(0);
    const box = await create(h, admin);
    expect((await run(h, admin, box.id, 'echo ok')).stdout).toBe('ok\n');
  }, 60_000);
});

describe('memory floor', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_SANDBOX_POOL: '2', HANGAR_SANDBOX_POOL_MIN_FREE_MEMORY_MB: String(1024 ** 3) });
  });
  afterAll(() => h?.close());

  it('a floor above the host’s memory keeps the pool empty; creates still work', async () => {
    const admin = await createOrgAdmin(h);
    await until('the pool', () => h.deps.state.get(POOL_STATE).holdingBack !== null, { timeoutMs: 30_000 });
    expect(h.deps.state.get(POOL_STATE).holdingBack).toMatch(/HANGAR_SANDBOX_POOL_MIN_FREE_MEMORY_MB/);
    expect(poolCounts(h.deps)).toEqual({ offline: 0, network: 0, building: 0 });
    const box = await create(h, admin);
    expect((await run(h, admin, box.id, 'echo ok')).stdout).toBe('ok\n');
  }, 60_000);
});

describe('warm pool at shutdown', () => {
  it('closing the app destroys every pooled sandbox', async () => {
    const h = await createHarness({ HANGAR_SANDBOX_POOL: '1', HANGAR_SANDBOX_POOL_NETWORK: '0', HANGAR_SANDBOX_POOL_MIN_FREE_MEMORY_MB: '0' });
    try {
      await until('the pool', () => poolCounts(h.deps).offline === 1, { timeoutMs: 60_000 });
      const [pooled] = readyIds(h);
      expect((await h.deps.sandboxes.list()).has(pooled!)).toBe(true);
      await h.app.close();
      expect((await h.deps.sandboxes.list()).has(pooled!)).toBe(false);
      expect(poolCounts(h.deps)).toEqual({ offline: 0, network: 0, building: 0 });
    } finally {
      await h.close();
    }
  }, 90_000);
});
