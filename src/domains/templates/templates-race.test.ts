import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, json, testDatabaseUrl, type Actor, type Harness } from '../../../test/harness.js';
import { expectError, until } from '../../../test/helpers.js';

// Template delete against sandbox create on PostgreSQL, where both run at once: the delete locks the template
// row, a create takes it FOR SHARE in the transaction that inserts its sandbox. Another session holds a table
// lock to stop one of them part-way through its transaction, so the interleaving is the same on every run.

const PG_URL = testDatabaseUrl ?? 'postgres://postgres@127.0.0.1:5432/test';
const withSchema = (url: string, schema: string) => `${url}${url.includes('?') ? '&' : '?'}schema=${schema}`;

describe('template delete and sandbox create at once (PostgreSQL)', () => {
  const schema = `t_${randomBytes(6).toString('hex')}`;
  let h: Harness;
  let admin: Actor;
  let blocker: pg.Client;
  let observer: pg.Client;

  beforeAll(async () => {
    h = await createHarness({ DATABASE_URL: withSchema(PG_URL, schema) });
    admin = await createOrgAdmin(h);
    observer = new pg.Client({ connectionString: PG_URL });
    await observer.connect();
  });
  afterAll(async () => {
    await observer?.end();
    await h?.close();
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
  });

  const call = (method: 'GET' | 'POST' | 'DELETE', url: string, payload?: object) => h.app.inject({ method, url, headers: admin.headers, payload });

  async function readyTemplate(slug: string) {
    const res = await call('POST', '/v1/templates', { slug, name: slug, env: { RACE: slug } });
    expect(res.statusCode, res.body).toBe(201);
    await until(
      `template ${slug} ready`,
      async () => {
        const t = json(await call('GET', `/v1/templates/${slug}`)).data;
        if (t.status === 'failed') throw new Error(`template ${slug} failed: ${t.error}`);
        return t.status === 'ready';
      },
      { timeoutMs: 180_000, intervalMs: 200 },
    );
  }

  /** A session of the app's that waits for `holder` (a backend pid) to let go of a lock; its pid. */
  async function waitingOn(holder: number, what: string, done: () => boolean): Promise<number | null> {
    return until(
      what,
      async () => {
        if (done()) return -1;
        const r = await observer.query('SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))', [holder]);
        return r.rows[0]?.pid as number | undefined;
      },
      { timeoutMs: 30_000, intervalMs: 20 },
    ).then((pid) => (pid === -1 ? null : pid));
  }

  async function openBlocker(lock: string): Promise<number> {
    blocker = new pg.Client({ connectionString: PG_URL });
    await blocker.connect();
    await blocker.query(`SET search_path = "${schema}"`);
    await blocker.query('BEGIN');
    await blocker.query(lock);
    return (await blocker.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
  }

  it('a delete while a sandbox is being created waits for it, then is 409 naming the sandbox', async () => {
    await readyTemplate('race-create-first');
    // The create stops at its sandbox insert, after it took the template FOR SHARE.
    const blockerPid = await openBlocker('LOCK TABLE sandboxes IN SHARE MODE');
    let created: Awaited<ReturnType<typeof call>> | undefined;
    let deleted: Awaited<ReturnType<typeof call>> | undefined;
    try {
      const creating = call('POST', '/v1/sandboxes', { template: 'race-create-first', network: false }).then((r) => (created = r));
      const createPid = await waitingOn(blockerPid, 'the create waiting at its insert', () => created !== undefined);
      expect(createPid, created?.body).not.toBeNull();
      const deleting = call('DELETE', '/v1/templates/race-create-first').then((r) => (deleted = r));
      // The delete waits for the create's transaction (without the share lock it would have gone through: 204).
      const deletePid = await waitingOn(createPid!, 'the delete waiting for the create', () => deleted !== undefined);
      expect(deletePid, deleted?.body).not.toBeNull();
      await blocker.query('ROLLBACK');
      await Promise.all([creating, deleting]);
    } finally {
      await blocker.end();
    }
    expect(created!.statusCode, created!.body).toBe(201);
    const sandboxId = json(created!).data.id as string;
    expect(expectError(deleted!, 409, 'conflict').message).toContain(sandboxId);
    // The template is still there and usable; once the sandbox is gone it can be deleted.
    expect((await call('GET', '/v1/templates/race-create-first')).statusCode).toBe(200);
    expect((await call('DELETE', `/v1/sandboxes/${sandboxId}`)).statusCode).toBe(204);
    expect((await call('DELETE', '/v1/templates/race-create-first')).statusCode).toBe(204);
  });

  it('a create while the template is being deleted waits for the delete, then is 404', async () => {
    await readyTemplate('race-delete-first');
    // The delete stops at its activity row, after it locked and deleted the template row.
    const blockerPid = await openBlocker('LOCK TABLE activity_events IN SHARE MODE');
    let created: Awaited<ReturnType<typeof call>> | undefined;
    let deleted: Awaited<ReturnType<typeof call>> | undefined;
    try {
      const deleting = call('DELETE', '/v1/templates/race-delete-first').then((r) => (deleted = r));
      const deletePid = await waitingOn(blockerPid, 'the delete waiting at its activity row', () => deleted !== undefined);
      expect(deletePid, deleted?.body).not.toBeNull();
      const creating = call('POST', '/v1/sandboxes', { template: 'race-delete-first', network: false }).then((r) => (created = r));
      // The create read the template as ready (the delete has not committed) and now waits for the delete.
      const createPid = await waitingOn(deletePid!, 'the create waiting for the delete', () => created !== undefined);
      expect(createPid, created?.body).not.toBeNull();
      await blocker.query('ROLLBACK');
      await Promise.all([creating, deleting]);
    } finally {
      await blocker.end();
    }
    expect(deleted!.statusCode, deleted!.body).toBe(204);
    expectError(created!, 404, 'not_found');
    const sandboxes = json(await call('GET', '/v1/sandboxes')).data as { templateSlug?: string; template?: string }[];
    expect(sandboxes).toEqual([]);
  });
});
