import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { addOrgMember, createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';

/**
 * Who may reach a sandbox inside one organization: its owner (the creator; for a thread's sandbox, the
 * thread's owner, whose run created it) has full access; other members see nothing of it; admins see its
 * metadata and may pause or destroy it, but its files, processes, output, env and commands are the owner's.
 */

let h: Harness;
let fake: FakeOpenAI;
let admin: Actor;
let member: Actor;
let otherAdmin: Actor;

beforeAll(async () => {
  fake = await new FakeOpenAI().start();
  h = await createHarness({ HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_OPENAI_MODELS: 'm1' });
  admin = await createOrgAdmin(h);
  member = await addOrgMember(h, admin, 'member');
  otherAdmin = await addOrgMember(h, admin, 'admin');
});
afterAll(async () => {
  await h?.close();
  await fake?.stop();
});

const call = (actor: Actor, opts: InjectOptions) => h.app.inject({ ...opts, headers: { ...actor.headers, ...(opts.headers ?? {}) } });

/** Every way into a sandbox's insides, as requests (a process `pid` of the owner's). */
function insideRequests(id: string, pid: number): Array<[string, InjectOptions]> {
  return [
    ['processes', { method: 'GET', url: `/v1/sandboxes/${id}/processes` }],
    ['process', { method: 'GET', url: `/v1/sandboxes/${id}/processes/${pid}` }],
    ['process output', { method: 'GET', url: `/v1/sandboxes/${id}/processes/${pid}/output` }],
    ['stdin', { method: 'POST', url: `/v1/sandboxes/${id}/processes/${pid}/stdin`, payload: { data: 'x' } }],
    ['kill', { method: 'POST', url: `/v1/sandboxes/${id}/processes/${pid}/kill`, payload: {} }],
    ['printenv', { method: 'POST', url: `/v1/sandboxes/${id}/commands`, payload: { cmd: 'printenv SECRET' } }],
    ['list files', { method: 'GET', url: `/v1/sandboxes/${id}/files?path=/home/user` }],
    ['read file', { method: 'GET', url: `/v1/sandboxes/${id}/files/content?path=/home/user/note.txt` }],
    [
      'write file',
      {
        method: 'PUT',
        url: `/v1/sandboxes/${id}/files/content?path=/home/user/evil.txt`,
        payload: 'evil',
        headers: { 'content-type': 'text/plain' },
      },
    ],
    ['mkdir', { method: 'POST', url: `/v1/sandboxes/${id}/folders`, payload: { path: '/home/user/evil' } }],
    ['move', { method: 'POST', url: `/v1/sandboxes/${id}/move`, payload: { from: '/home/user/note.txt', to: '/home/user/moved.txt' } }],
    ['delete file', { method: 'DELETE', url: `/v1/sandboxes/${id}/files?path=/home/user/note.txt` }],
  ];
}

/** What the owner can do (the control), and what another member and an admin get. */
async function expectOwnerOnly(owner: Actor, id: string, secretCmd = 'printenv SECRET') {
  // Control: the owner reaches everything, including its secret.
  const env = await call(owner, {
    method: 'POST',
    url: `/v1/sandboxes/${id}/commands`,
    payload: { cmd: `${secretCmd}; echo note > /home/user/note.txt` },
  });
  expect(env.statusCode, env.body).toBe(200);
  expect(json(env).data.stdout).toBe('x\n');
  const bg = await call(owner, {
    method: 'POST',
    url: `/v1/sandboxes/${id}/commands`,
    payload: { cmd: 'sleep 600', background: true, keepStdin: true },
  });
  expect(bg.statusCode, bg.body).toBe(201);
  const pid = json(bg).data.pid as number;
  const reads = insideRequests(id, pid).filter(([, r]) => r.method === 'GET');
  for (const [what, req] of reads) expect((await call(owner, req)).statusCode, `owner: ${what}`).toBe(200);
  expect((await call(owner, { method: 'GET', url: `/v1/sandboxes/${id}` })).statusCode).toBe(200);
  expect((await call(owner, { method: 'GET', url: `/v1/sandboxes/${id}/activity` })).statusCode).toBe(200);
  const ownerList = json(await call(owner, { method: 'GET', url: '/v1/sandboxes?limit=100' })).data as Array<{ id: string }>;
  expect(ownerList.map((s) => s.id)).toContain(id);

  // Another member: the sandbox does not exist.
  for (const [what, req] of [
    ['get', { method: 'GET', url: `/v1/sandboxes/${id}` }] as const,
    ['activity', { method: 'GET', url: `/v1/sandboxes/${id}/activity` }] as const,
    ['activity filter', { method: 'GET', url: `/v1/activity?sandbox_id=${id}` }] as const,
    ['activity resource', { method: 'GET', url: `/v1/activity?resource_type=sandbox&resource_id=${id}` }] as const,
    ['pause', { method: 'POST', url: `/v1/sandboxes/${id}/pause` }] as const,
    ['resume', { method: 'POST', url: `/v1/sandboxes/${id}/resume` }] as const,
    ['destroy', { method: 'DELETE', url: `/v1/sandboxes/${id}` }] as const,
    ...insideRequests(id, pid),
  ] as Array<[string, InjectOptions]>) {
    const res = await call(member, req);
    expect(res.statusCode, `member: ${what}: ${res.body}`).toBe(404);
    expect(res.body).not.toContain('"x\\n"');
  }
  const memberList = json(await call(member, { method: 'GET', url: '/v1/sandboxes?limit=100' })).data as Array<{ id: string }>;
  expect(memberList.map((s) => s.id)).not.toContain(id);
  const memberPaused = json(await call(member, { method: 'GET', url: '/v1/sandboxes?state=running&limit=100' })).data as Array<{ id: string }>;
  expect(memberPaused.map((s) => s.id)).not.toContain(id);

  // An admin who is not the owner: metadata yes, insides no (403 saying why).
  if (owner.userId !== otherAdmin.userId) {
    const meta = await call(otherAdmin, { method: 'GET', url: `/v1/sandboxes/${id}` });
    expect(meta.statusCode).toBe(200);
    expect(json(meta).data.ownerUserId).toBe(owner.userId);
    const adminList = json(await call(otherAdmin, { method: 'GET', url: '/v1/sandboxes?limit=100' })).data as Array<{
      id: string;
      ownerUserId: string;
    }>;
    expect(adminList.find((s) => s.id === id)?.ownerUserId).toBe(owner.userId);
    expect((await call(otherAdmin, { method: 'GET', url: `/v1/sandboxes/${id}/activity` })).statusCode).toBe(200);
    for (const [what, req] of insideRequests(id, pid)) {
      const res = await call(otherAdmin, req);
      expect(res.statusCode, `admin: ${what}: ${res.body}`).toBe(403);
      expect(json(res).error.message).toContain('owner');
    }
  }
  // Nothing the others tried changed the sandbox: the owner's process still runs, the file is where it was.
  const proc = await call(owner, { method: 'GET', url: `/v1/sandboxes/${id}/processes/${pid}` });
  expect(json(proc).data.running).toBe(true);
  const note = await call(owner, { method: 'GET', url: `/v1/sandboxes/${id}/files/content?path=/home/user/note.txt` });
  expect(note.body).toBe('note\n');
  const evil = await call(owner, { method: 'GET', url: `/v1/sandboxes/${id}/files?path=/home/user/evil.txt` });
  expect(evil.statusCode).toBe(404);
}

describe('a sandbox created by an admin, against another member of the organization', () => {
  let id: string;
  beforeAll(async () => {
    const res = await call(admin, { method: 'POST', url: '/v1/sandboxes', payload: { network: false, env: { SECRET: 'x' } } });
    expect(res.statusCode, res.body).toBe(201);
    id = json(res).data.id;
  });
  afterAll(async () => {
    await call(admin, { method: 'DELETE', url: `/v1/sandboxes/${id}` });
  });

  it('the owner reaches everything; another member gets 404 on every route and its activity; an admin sees metadata only', async () => {
    await expectOwnerOnly(admin, id);
  });

  it('an admin may pause and destroy another’s sandbox, and resume is the owner’s', async () => {
    const res = await call(member, { method: 'POST', url: '/v1/sandboxes', payload: { network: false } });
    expect(res.statusCode, res.body).toBe(201);
    const sid = json(res).data.id;
    expect((await call(otherAdmin, { method: 'POST', url: `/v1/sandboxes/${sid}/pause` })).statusCode).toBe(200);
    const resume = await call(otherAdmin, { method: 'POST', url: `/v1/sandboxes/${sid}/resume` });
    expect(resume.statusCode).toBe(403);
    expect((await call(member, { method: 'POST', url: `/v1/sandboxes/${sid}/resume` })).statusCode).toBe(200);
    expect((await call(otherAdmin, { method: 'DELETE', url: `/v1/sandboxes/${sid}` })).statusCode).toBe(204);
    expect(json(await call(member, { method: 'GET', url: `/v1/sandboxes/${sid}` })).data.state).toBe('destroyed');
  });
});

describe('the sandbox of an admin’s private thread, made by a run', () => {
  it('is the thread owner’s: another member gets 404 everywhere, an admin metadata only', async () => {
    const agent = await call(admin, {
      method: 'POST',
      url: '/v1/agents',
      payload: { slug: 'coder', executionMode: 'in_sandbox', model: 'm1', instructions: 'You write code.', tools: ['exec_command'] },
    });
    expect(agent.statusCode, agent.body).toBe(201);
    fake.script({ text: 'ready' });
    const run = await call(admin, { method: 'POST', url: '/v1/run', payload: { agent: 'coder', prompt: 'hello' } });
    expect(run.statusCode, run.body).toBe(200);
    const { sandboxId, threadId } = json(run).data as { sandboxId: string; threadId: string };
    expect(sandboxId).toMatch(/^sbx_/);
    expect((await call(member, { method: 'GET', url: `/v1/threads/${threadId}` })).statusCode).toBe(404);
    // The owner keeps a secret in the thread's sandbox, as an agent's work would.
    const put = await call(admin, {
      method: 'PUT',
      url: `/v1/sandboxes/${sandboxId}/files/content?path=/home/user/secret`,
      payload: 'x\n',
      headers: { 'content-type': 'text/plain' },
    });
    expect(put.statusCode, put.body).toBe(200);
    await expectOwnerOnly(admin, sandboxId, 'cat /home/user/secret');
    await call(admin, { method: 'DELETE', url: `/v1/sandboxes/${sandboxId}` });
  });
});
