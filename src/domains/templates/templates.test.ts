import { existsSync, readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { expectActivity } from '../../../test/activity.js';
import { securitySuite } from '../../../test/security.js';
import { expectError, readSse, type SseEvent } from '../../../test/helpers.js';

// Real builds: a build container runs each step as root with network (Debian's mirror and npm are reachable
// here, PyPI is not). Builds run one at a time per server, so the file shares its few builds between tests.

let h: Harness;
let admin: Actor;
let baseUrl: string;

beforeAll(async () => {
  h = await createHarness();
  admin = await createOrgAdmin(h);
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  baseUrl = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
});
afterAll(() => h?.close());

/** The host's `ID-VERSION_ID`, which base-ubuntu reports as its os (templates build on this server's userland). */
function hostOs(): string {
  const text = readFileSync('/etc/os-release', 'utf8');
  const field = (k: string) => text.match(new RegExp(`^${k}="?([^"\\n]*)"?$`, 'm'))?.[1] ?? '';
  return `${field('ID')}-${field('VERSION_ID')}`;
}

// ---- helpers: talk HTTP the way a client would -------------------------------------------------

function call(actor: Actor, method: 'GET' | 'POST' | 'DELETE', url: string, body?: unknown) {
  return h.app.inject({ method, url, headers: actor.headers, ...(body !== undefined ? { payload: body as object } : {}) });
}

const postTemplate = (actor: Actor, body: Record<string, unknown>) => call(actor, 'POST', '/v1/templates', body);

async function getTemplate(actor: Actor, slug: string) {
  const res = await call(actor, 'GET', `/v1/templates/${slug}`);
  expect(res.statusCode, res.body).toBe(200);
  return json(res).data;
}

/** Polls GET until the build has ended; returns the template and every status seen on the way. */
async function waitForBuild(actor: Actor, slug: string, timeoutMs = 120_000) {
  const seen: string[] = [];
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const t = await getTemplate(actor, slug);
    if (seen[seen.length - 1] !== t.status) seen.push(t.status);
    if (t.status === 'ready' || t.status === 'failed') return { template: t, seen };
    if (Date.now() > deadline) throw new Error(`template ${slug} still ${t.status} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function build(actor: Actor, body: Record<string, unknown>) {
  const res = await postTemplate(actor, body);
  expect(res.statusCode, res.body).toBe(201);
  return waitForBuild(actor, String(body.slug));
}

/** Opens the build log over a real socket as Server-Sent Events and collects every event until the server ends the stream. */
async function readLogStream(actor: Actor, slug: string): Promise<{ status: number; contentType: string | null; events: SseEvent[] }> {
  const res = await fetch(`${baseUrl}/v1/templates/${slug}/logs`, {
    headers: { ...actor.headers, accept: 'text/event-stream' },
    signal: AbortSignal.timeout(120_000),
  });
  const events = await readSse(res);
  return { status: res.status, contentType: res.headers.get('content-type'), events };
}

async function newSandbox(actor: Actor, template: string) {
  const res = await call(actor, 'POST', '/v1/sandboxes', { template, network: false });
  expect(res.statusCode, res.body).toBe(201);
  const sandbox = json(res).data;
  expect(sandbox.state).toBe('running');
  return sandbox.id as string;
}

async function run(actor: Actor, sandboxId: string, cmd: string) {
  const res = await call(actor, 'POST', `/v1/sandboxes/${sandboxId}/commands`, { cmd });
  expect(res.statusCode, res.body).toBe(200);
  return json(res).data as { exitCode: number | null; stdout: string; stderr: string };
}

async function destroySandbox(actor: Actor, sandboxId: string) {
  const res = await call(actor, 'DELETE', `/v1/sandboxes/${sandboxId}`);
  expect(res.statusCode, res.body).toBe(204);
}

const layerDir = (templateId: string) => path.join(h.deps.config.sandboxes.dir, h.deps.installId, 'layers', templateId);

// ---- system templates --------------------------------------------------------------------------

describe('system templates', () => {
  it('lists base-ubuntu, ready on this server’s own userland, and desktop-ubuntu, not built yet', async () => {
    const res = await call(admin, 'GET', '/v1/templates');
    expect(res.statusCode).toBe(200);
    const list = json(res).data as any[];
    const base = list.find((t) => t.slug === 'base-ubuntu');
    expect(base).toMatchObject({ status: 'ready', progress: 100, system: true, os: hostOs(), source: 'base', parent: null, error: null });
    expect(base.runs).toContain("this server's own userland");
    const desktop = list.find((t) => t.slug === 'desktop-ubuntu');
    expect(desktop).toMatchObject({ status: 'pending', system: true, os: hostOs(), parent: 'base-ubuntu' });
    expect(desktop.packages.apt).toContain('xvfb');
    expect(desktop.envKeys).toContain('DISPLAY');
  });

  it('gets base-ubuntu by slug with the URL of its build log', async () => {
    const base = await getTemplate(admin, 'base-ubuntu');
    expect(base.id).toMatch(/^tpl_/);
    expect(base.buildLog.endsWith('/v1/templates/base-ubuntu/logs')).toBe(true);
  });
});

// ---- a build from the builder fields ------------------------------------------------------------

/** The apt + npm template every later layering test builds on. */
let apt: { id: string; slug: string } | null = null;

describe('a build from the builder fields', () => {
  const slug = 'cowsay-tools';

  // The build fetches from Debian's real mirror, which at times stalls while apt retries ("Ign:"): minutes, not 30 s.
  it('answers 201 pending, streams its log live until ready, and moves pending → building → ready', async () => {
    const res = await postTemplate(admin, { slug, name: 'Cowsay tools', apt: ['cowsay'], npm: ['left-pad'], env: { GREETING: 'hi' } });
    expect(res.statusCode, res.body).toBe(201);
    const created = json(res).data;
    expect(Object.keys(created).sort()).toEqual(['createdAt', 'id', 'name', 'slug', 'status']);
    expect(created).toMatchObject({ slug, name: 'Cowsay tools', status: 'pending' });
    expect(created.id).toMatch(/^tpl_/);
    expect(Number.isNaN(Date.parse(created.createdAt))).toBe(false);

    const [stream, polled] = await Promise.all([readLogStream(admin, slug), waitForBuild(admin, slug)]);

    expect(stream.status).toBe(200);
    expect(stream.contentType).toMatch(/^text\/event-stream/);
    const logs = stream.events.filter((e) => e.event === 'log');
    const lines = logs.map((e) => e.data.line as string);
    expect(lines.some((l) => /Step 1\/2/.test(l) && l.includes('apt-get install'))).toBe(true);
    expect(lines.some((l) => /Step 2\/2/.test(l) && l.includes('npm install'))).toBe(true);
    expect(lines.some((l) => /Setting up cowsay/.test(l))).toBe(true);
    // Every line once, in order, none lost between the replay and the live part.
    expect(logs.map((e) => e.data.n)).toEqual(logs.map((_, i) => i));
    const progress = stream.events.filter((e) => e.event === 'progress').map((e) => e.data);
    expect(progress).toContainEqual({ progress: 50, step: 1, steps: 2 });
    expect(progress.every((p) => p.progress < 100)).toBe(true);
    const last = stream.events[stream.events.length - 1];
    expect(last.event).toBe('status');
    expect(last.data).toMatchObject({ status: 'ready', progress: 100, error: null });

    expect(['pending', ...polled.seen].filter((s, i, all) => s !== all[i - 1])).toEqual(['pending', 'building', 'ready']);
    expect(polled.template).toMatchObject({
      id: created.id,
      status: 'ready',
      progress: 100,
      system: false,
      source: 'builder',
      parent: 'base-ubuntu',
      os: hostOs(),
      error: null,
      envKeys: ['GREETING'],
      packages: { apt: ['cowsay'], npm: ['left-pad'], pip: [] },
    });
    expect(polled.template.runs).toContain('cowsay');
    expect(polled.template.buildStartedAt).toBeTruthy();
    expect(polled.template.buildFinishedAt).toBeTruthy();
    for (const eventType of ['template.created', 'template.build_started', 'template.ready']) {
      const event = await expectActivity(h, admin, { eventType, resourceType: 'template', resourceId: created.id, metadata: { slug } });
      expect(event.actorUserId).toBe(admin.userId);
    }
    apt = { id: created.id, slug };
  }, 180_000);

  it('runs in a sandbox with its apt and npm packages and its env', async () => {
    expect(apt).not.toBeNull();
    const sbx = await newSandbox(admin, slug);
    const cow = await run(admin, sbx, '/usr/games/cowsay moo');
    expect(cow.exitCode, cow.stderr).toBe(0);
    expect(cow.stdout).toContain('< moo >');
    const pad = await run(admin, sbx, `NODE_PATH="$(npm root -g)" node -e "console.log(require('left-pad')('7', 3, '0'))"`);
    expect(pad.exitCode, pad.stderr).toBe(0);
    expect(pad.stdout.trim()).toBe('007');
    const env = await run(admin, sbx, 'echo "$GREETING"');
    expect(env.stdout.trim()).toBe('hi');
    await destroySandbox(admin, sbx);
  });

  it('gives the log as text/plain without the event-stream header', async () => {
    const res = await call(admin, 'GET', `/v1/templates/${slug}/logs`);
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
    expect(res.body).toMatch(/Step 1\/2: apt-get install cowsay/);
    expect(res.body).toMatch(/Setting up cowsay/);
    expect(res.body).toMatch(new RegExp(`Template ${slug} is ready`));
  });

  it('replays the whole log and the final status to a stream opened after the build', async () => {
    const text = (await call(admin, 'GET', `/v1/templates/${slug}/logs`)).body;
    const stream = await readLogStream(admin, slug);
    expect(stream.status).toBe(200);
    const logs = stream.events.filter((e) => e.event === 'log');
    expect(logs.map((e) => e.data.line)).toEqual(text.replace(/\n$/, '').split('\n'));
    expect(logs.map((e) => e.data.n)).toEqual(logs.map((_, i) => i));
    expect(stream.events.map((e) => e.event).slice(-1)).toEqual(['status']);
    expect(stream.events[stream.events.length - 1].data).toMatchObject({ status: 'ready', progress: 100, error: null });
  });

  it('gives every line to a stream whose first look at the log came before a build that then ended', async () => {
    // Builds run one at a time: the template waits (pending, no log yet) behind a short one.
    expect((await postTemplate(admin, { slug: 'ahead', name: 'Ahead', dockerfile: 'FROM base-ubuntu\nRUN sleep 1\n' })).statusCode).toBe(201);
    const res = await postTemplate(admin, { slug: 'behind', name: 'Behind', dockerfile: 'FROM base-ubuntu\nRUN echo from-behind\n' });
    expect(res.statusCode, res.body).toBe(201);
    const id = json(res).data.id as string;
    expect((await getTemplate(admin, 'behind')).status).toBe('pending');

    // The stream reads the log while it is still empty, and the storage answers only once the build is over
    // (a slow disk, a busy server): the lines written meanwhile must still reach the client.
    const blobs = h.deps.blobs;
    const size = blobs.size;
    let held = false;
    blobs.size = async (key: string) => {
      if (held || key !== `templates/${id}/build.log`) return size.call(blobs, key);
      held = true;
      const then = await size.call(blobs, key);
      await waitForBuild(admin, 'behind');
      return then;
    };
    let stream: Awaited<ReturnType<typeof readLogStream>>;
    try {
      stream = await readLogStream(admin, 'behind');
    } finally {
      blobs.size = size;
    }
    expect(held).toBe(true);
    const text = (await call(admin, 'GET', '/v1/templates/behind/logs')).body;
    const logs = stream.events.filter((e) => e.event === 'log');
    expect(logs.map((e) => e.data.line)).toEqual(text.replace(/\n$/, '').split('\n'));
    expect(logs.map((e) => e.data.line)).toContain('from-behind');
    expect(logs.map((e) => e.data.n)).toEqual(logs.map((_, i) => i));
    expect(stream.events[stream.events.length - 1]).toMatchObject({ event: 'status', data: { status: 'ready' } });
    expect((await getTemplate(admin, 'ahead')).status).toBe('ready');
  });
});

// ---- a failing build ---------------------------------------------------------------------------

describe('a failing build', () => {
  const slug = 'broken-apt';

  it('ends failed with the failing step named, and the log shows apt’s error', async () => {
    const { template, seen } = await build(admin, { slug, name: 'Broken', apt: ['no-such-package-hangar'] });
    expect(seen[seen.length - 1]).toBe('failed');
    expect(template.status).toBe('failed');
    expect(template.error).toMatch(/step 1 \(apt-get install no-such-package-hangar\) failed/);
    expect(template.error).toMatch(/exit code \d+/);
    expect(template.progress).toBeLessThan(100);

    const log = (await call(admin, 'GET', `/v1/templates/${slug}/logs`)).body;
    expect(log).toMatch(/Unable to locate package no-such-package-hangar/);
    expect(log.split('\n')).toContain(`error: ${template.error}`);

    const stream = await readLogStream(admin, slug);
    expect(stream.events[stream.events.length - 1]).toMatchObject({ event: 'status', data: { status: 'failed', error: template.error } });
    const failed = await expectActivity(h, admin, {
      eventType: 'template.failed',
      resourceType: 'template',
      resourceId: template.id,
      metadata: { slug },
    });
    expect(failed).toMatchObject({ severity: 'error', status: 'failed', summary: template.error });
  });

  it('cannot start a sandbox', async () => {
    const res = await call(admin, 'POST', '/v1/sandboxes', { template: slug, network: false });
    const error = expectError(res, 409, 'invalid_state');
    expect(error.state).toBe('failed');
    expect(error.message).toContain(slug);
  });

  it('can be deleted once failed', async () => {
    const id = (await getTemplate(admin, slug)).id;
    const res = await call(admin, 'DELETE', `/v1/templates/${slug}`);
    expect(res.statusCode, res.body).toBe(204);
    expectError(await call(admin, 'GET', `/v1/templates/${slug}`), 404, 'not_found');
    await expectActivity(h, admin, { eventType: 'template.deleted', resourceType: 'template', resourceId: id, metadata: { slug } });
  });
});

// ---- Dockerfile builds -------------------------------------------------------------------------

/** The Dockerfile template on base-ubuntu, with a sandbox that uses it (for the delete tests). */
let dockerfileTpl: { id: string; slug: string; sandboxId: string } | null = null;
/** The Dockerfile template built on the apt template, with its sandbox. */
let layeredTpl: { id: string; slug: string; sandboxId: string } | null = null;

describe('Dockerfile builds', () => {
  it('builds FROM base-ubuntu with ENV, WORKDIR and RUN, and a sandbox sees all three', async () => {
    const slug = 'docker-marker';
    const dockerfile = ['FROM base-ubuntu', 'ENV A=1', 'WORKDIR /opt/app', 'RUN echo built > /opt/app/marker'].join('\n');
    const { template } = await build(admin, { slug, name: 'Marker', dockerfile });
    expect(template).toMatchObject({
      status: 'ready',
      progress: 100,
      source: 'dockerfile',
      parent: 'base-ubuntu',
      workdir: '/opt/app',
      envKeys: ['A'],
    });

    const sbx = await newSandbox(admin, slug);
    const marker = await run(admin, sbx, 'cat /opt/app/marker; echo "A=$A"; pwd');
    expect(marker.exitCode, marker.stderr).toBe(0);
    expect(marker.stdout.split('\n')).toEqual(['built', 'A=1', '/opt/app', '']);
    dockerfileTpl = { id: template.id, slug, sandboxId: sbx };
  });

  it('builds FROM a custom template, seeing its packages and env in the build and in sandboxes', async () => {
    expect(apt).not.toBeNull();
    const slug = 'layered-cow';
    const dockerfile = [`FROM ${apt!.slug}`, 'RUN /usr/games/cowsay "layer $GREETING" > /etc/cow.txt'].join('\n');
    const { template } = await build(admin, { slug, name: 'Layered', dockerfile });
    expect(template.error).toBeNull();
    expect(template).toMatchObject({ status: 'ready', parent: apt!.slug, source: 'dockerfile' });

    const sbx = await newSandbox(admin, slug);
    const out = await run(admin, sbx, 'cat /etc/cow.txt; /usr/games/cowsay again; echo "G=$GREETING"');
    expect(out.exitCode, out.stderr).toBe(0);
    expect(out.stdout).toContain('< layer hi >');
    expect(out.stdout).toContain('< again >');
    expect(out.stdout).toContain('G=hi');
    layeredTpl = { id: template.id, slug, sandboxId: sbx };
  });

  it('refuses an unsupported instruction, naming its line', async () => {
    const res = await postTemplate(admin, { slug: 'docker-copy', name: 'Copy', dockerfile: 'FROM base-ubuntu\nCOPY . /app\n' });
    const error = expectError(res, 400, 'invalid_request');
    expect(error.message).toMatch(/line 2/);
    expect(error.message).toMatch(/COPY is not supported/);
    expect(error.issues?.[0]?.path).toBe('dockerfile');
    expectError(await call(admin, 'GET', '/v1/templates/docker-copy'), 404, 'not_found');
  });

  it('refuses FROM a container image', async () => {
    const res = await postTemplate(admin, { slug: 'docker-image', name: 'Image', dockerfile: 'FROM ubuntu:22.04\nRUN true\n' });
    const error = expectError(res, 400, 'invalid_request');
    expect(error.message).toMatch(/line 1/);
    expect(error.message).toContain('ubuntu:22.04');
  });

  it('refuses FROM a template that does not exist', async () => {
    const res = await postTemplate(admin, { slug: 'docker-orphan', name: 'Orphan', dockerfile: 'FROM no-such-template\nRUN true\n' });
    const error = expectError(res, 400, 'invalid_request');
    expect(error.message).toContain('no-such-template');
  });

  it('refuses a dockerfile together with builder fields', async () => {
    const res = await postTemplate(admin, { slug: 'docker-both', name: 'Both', dockerfile: 'FROM base-ubuntu\nRUN true\n', apt: ['cowsay'] });
    const error = expectError(res, 400, 'invalid_request');
    expect(error.issues?.[0]?.path).toBe('apt');
    expect(error.message).toMatch(/either "dockerfile" or the builder fields/);
  });
});

// ---- bad input ---------------------------------------------------------------------------------

describe('bad input', () => {
  const cases: Array<{ name: string; body: Record<string, unknown>; path: string; message?: RegExp }> = [
    { name: 'an invalid slug', body: { slug: 'Bad_Slug', name: 'x' }, path: 'slug' },
    { name: 'a slug that starts with "-"', body: { slug: '-dash', name: 'x' }, path: 'slug' },
    { name: 'an unknown OS', body: { slug: 'win', name: 'x', os: 'windows' }, path: 'os', message: /unknown operating system "windows"/ },
    {
      name: 'an apt name with shell characters',
      body: { slug: 'inject', name: 'x', apt: ['foo;rm'] },
      path: 'apt[0]',
      message: /not a Debian package name/,
    },
    { name: 'a pip URL', body: { slug: 'pip-url', name: 'x', pip: ['https://example.com/pkg-1.0.tar.gz'] }, path: 'pip[0]', message: /not a URL/ },
    { name: 'a missing name', body: { slug: 'no-name' }, path: 'name' },
    { name: 'a NUL in an env value', body: { slug: 'env-nul', name: 'x', env: { A: 'a\u0000b' } }, path: 'env.A', message: /NUL/ },
    {
      name: 'a Dockerfile with 9,000 nested ${A:-...}',
      body: { slug: 'deep-subst', name: 'x', dockerfile: `FROM base-ubuntu\nENV B=${'${A:-'.repeat(9000)}x${'}'.repeat(9000)}\n` },
      path: 'dockerfile',
      message: /nested/,
    },
  ];
  for (const c of cases) {
    it(`refuses ${c.name} with 400 naming ${c.path}, creating nothing`, async () => {
      const error = expectError(await postTemplate(admin, c.body), 400, 'invalid_request');
      // Schema errors name the field under `body.`; the planner's checks name it alone.
      expect(error.issues?.map((i) => i.path.replace(/^body\./, ''))).toContain(c.path);
      if (c.message) expect(error.message).toMatch(c.message);
      if (/^[a-z0-9][a-z0-9-]*$/.test(String(c.body.slug))) {
        expectError(await call(admin, 'GET', `/v1/templates/${c.body.slug}`), 404, 'not_found');
      }
    });
  }
});

// ---- slugs -------------------------------------------------------------------------------------

describe('slugs', () => {
  let other: Actor;
  beforeAll(async () => {
    other = await createOrgAdmin(h);
  });

  it('are unique within an organization', async () => {
    const first = await build(admin, { slug: 'twice', name: 'First' });
    expect(first.template.status).toBe('ready');
    const error = expectError(await postTemplate(admin, { slug: 'twice', name: 'Second' }), 409, 'conflict');
    expect(error.message).toContain('twice');
    expect((await getTemplate(admin, 'twice')).name).toBe('First');
  });

  it('are per organization: another one can reuse a slug and never sees the first one’s template', async () => {
    expectError(await call(other, 'GET', '/v1/templates/twice'), 404, 'not_found');
    expectError(await call(other, 'GET', '/v1/templates/twice/logs'), 404, 'not_found');
    expectError(await call(other, 'DELETE', '/v1/templates/twice'), 404, 'not_found');
    const before = json(await call(other, 'GET', '/v1/templates')).data as any[];
    expect(before.map((t) => t.slug).sort()).toEqual(['base-ubuntu', 'desktop-ubuntu']);
    expectError(await call(other, 'POST', '/v1/sandboxes', { template: 'twice', network: false }), 404, 'not_found');
    const from = expectError(
      await postTemplate(other, { slug: 'on-theirs', name: 'x', dockerfile: 'FROM twice\nRUN true\n' }),
      400,
      'invalid_request',
    );
    expect(from.message).toContain('FROM twice: no such template');

    const mine = await build(other, { slug: 'twice', name: 'Theirs' });
    expect(mine.template.status).toBe('ready');
    const theirs = await getTemplate(admin, 'twice');
    expect(mine.template.id).not.toBe(theirs.id);
    expect(theirs.name).toBe('First');
    const listed = (json(await call(other, 'GET', '/v1/templates')).data as any[]).filter((t) => t.slug === 'twice');
    expect(listed.map((t) => t.id)).toEqual([mine.template.id]);
  });

  it('cannot take a system template’s slug', async () => {
    const error = expectError(await postTemplate(admin, { slug: 'base-ubuntu', name: 'Mine' }), 409, 'conflict');
    expect(error.message).toContain('system template');
    expect((await getTemplate(admin, 'base-ubuntu')).system).toBe(true);
  });

  it('an unknown slug is 404', async () => {
    expectError(await call(admin, 'GET', '/v1/templates/no-such-template'), 404, 'not_found');
    expectError(await call(admin, 'GET', '/v1/templates/no-such-template/logs'), 404, 'not_found');
    expectError(await call(admin, 'DELETE', '/v1/templates/no-such-template'), 404, 'not_found');
    expectError(await call(admin, 'POST', '/v1/sandboxes', { template: 'no-such-template', network: false }), 404, 'not_found');
  });
});

// ---- a template that is not ready --------------------------------------------------------------

describe('a template that is still building', () => {
  it('cannot start a sandbox or be deleted or built on until it is ready', async () => {
    const slug = 'slow-build';
    const res = await postTemplate(admin, { slug, name: 'Slow', dockerfile: 'FROM base-ubuntu\nRUN sleep 5\n' });
    expect(res.statusCode, res.body).toBe(201);

    const early = expectError(await call(admin, 'POST', '/v1/sandboxes', { template: slug, network: false }), 409, 'invalid_state');
    expect(['pending', 'building']).toContain(early.state);

    const deadline = Date.now() + 60_000;
    while ((await getTemplate(admin, slug)).status === 'pending' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect((await getTemplate(admin, slug)).status).toBe('building');

    const sandbox = expectError(await call(admin, 'POST', '/v1/sandboxes', { template: slug, network: false }), 409, 'invalid_state');
    expect(sandbox.state).toBe('building');
    const del = expectError(await call(admin, 'DELETE', `/v1/templates/${slug}`), 409, 'invalid_state');
    expect(del.state).toBe('building');
    const child = expectError(
      await postTemplate(admin, { slug: 'slow-child', name: 'Child', dockerfile: `FROM ${slug}\nRUN true\n` }),
      409,
      'invalid_state',
    );
    expect(child.state).toBe('building');

    const { template } = await waitForBuild(admin, slug);
    expect(template.status).toBe('ready');
    expect((await call(admin, 'DELETE', `/v1/templates/${slug}`)).statusCode).toBe(204);
    expectError(await call(admin, 'GET', `/v1/templates/${slug}`), 404, 'not_found');
  });
});

// ---- delete ------------------------------------------------------------------------------------

describe('delete', () => {
  it('refuses while a sandbox uses the template, then removes it and its layer once the sandbox is destroyed', async () => {
    expect(dockerfileTpl).not.toBeNull();
    const { id, slug, sandboxId } = dockerfileTpl!;
    expect(existsSync(layerDir(id))).toBe(true);

    const busy = expectError(await call(admin, 'DELETE', `/v1/templates/${slug}`), 409, 'conflict');
    expect(busy.message).toContain(sandboxId);
    expect((await getTemplate(admin, slug)).status).toBe('ready');

    await destroySandbox(admin, sandboxId);
    const res = await call(admin, 'DELETE', `/v1/templates/${slug}`);
    expect(res.statusCode, res.body).toBe(204);
    expect(existsSync(layerDir(id))).toBe(false);
    expectError(await call(admin, 'GET', `/v1/templates/${slug}`), 404, 'not_found');
    expectError(await call(admin, 'GET', `/v1/templates/${slug}/logs`), 404, 'not_found');
    const list = json(await call(admin, 'GET', '/v1/templates')).data as any[];
    expect(list.some((t) => t.slug === slug)).toBe(false);

    // The slug is free again.
    const again = await build(admin, { slug, name: 'Again' });
    expect(again.template).toMatchObject({ status: 'ready', name: 'Again', source: 'builder' });
    expect(again.template.id).not.toBe(id);
  });

  it('refuses a template another is built on until that one is gone', async () => {
    expect(apt).not.toBeNull();
    expect(layeredTpl).not.toBeNull();
    const error = expectError(await call(admin, 'DELETE', `/v1/templates/${apt!.slug}`), 409, 'conflict');
    expect(error.message).toContain(layeredTpl!.slug);
    expect((await getTemplate(admin, apt!.slug)).status).toBe('ready');

    await destroySandbox(admin, layeredTpl!.sandboxId);
    expect((await call(admin, 'DELETE', `/v1/templates/${layeredTpl!.slug}`)).statusCode).toBe(204);
    expect(existsSync(layerDir(layeredTpl!.id))).toBe(false);
    expect((await call(admin, 'DELETE', `/v1/templates/${apt!.slug}`)).statusCode).toBe(204);
    expect(existsSync(layerDir(apt!.id))).toBe(false);
  });

  it('refuses a system template with 403', async () => {
    for (const slug of ['base-ubuntu', 'desktop-ubuntu']) {
      const error = expectError(await call(admin, 'DELETE', `/v1/templates/${slug}`), 403, 'forbidden');
      expect(error.message).toContain(slug);
      expect((await getTemplate(admin, slug)).system).toBe(true);
    }
  });
});

// ---- security ----------------------------------------------------------------------------------

/** One custom template per owner organization (an empty builder build: no steps, ready at once). */
const owned = new Map<string, Promise<string>>();
function ownedTemplate(owner: Actor, sh: Harness): Promise<string> {
  let slug = owned.get(owner.orgId);
  if (!slug) {
    slug = (async () => {
      const res = await sh.app.inject({ method: 'POST', url: '/v1/templates', headers: owner.headers, payload: { slug: 'owned', name: 'Owned' } });
      expect(res.statusCode, res.body).toBe(201);
      return 'owned';
    })();
    owned.set(owner.orgId, slug);
  }
  return slug;
}

securitySuite('templates', [
  { method: 'GET', url: () => '/v1/templates', scope: 'templates:read' },
  { method: 'POST', url: () => '/v1/templates', scope: 'templates:write', body: { slug: 'sec-new', name: 'New' } },
  { method: 'GET', url: async (o, sh) => `/v1/templates/${await ownedTemplate(o, sh)}`, scope: 'templates:read', crossOrg: true },
  { method: 'GET', url: async (o, sh) => `/v1/templates/${await ownedTemplate(o, sh)}/logs`, scope: 'templates:read', crossOrg: true },
  { method: 'DELETE', url: async (o, sh) => `/v1/templates/${await ownedTemplate(o, sh)}`, scope: 'templates:write', crossOrg: true },
]);

// ---- disk: the build's size limit and the host's free-space floor ------------------------------

describe('the build disk limit', () => {
  let bh: Harness;
  let owner: Actor;
  beforeAll(async () => {
    bh = await createHarness({ HANGAR_TEMPLATE_BUILD_DISK_MB: '64' });
    owner = await createOrgAdmin(bh);
  });
  afterAll(() => bh?.close());

  const req = (method: 'GET' | 'POST', url: string, body?: unknown) =>
    bh.app.inject({ method, url, headers: owner.headers, ...(body !== undefined ? { payload: body as object } : {}) });

  async function buildOn(slug: string, dockerfile: string) {
    const res = await req('POST', '/v1/templates', { slug, name: slug, dockerfile });
    expect(res.statusCode, res.body).toBe(201);
    const deadline = Date.now() + 120_000;
    for (;;) {
      const t = json(await req('GET', `/v1/templates/${slug}`)).data;
      if (t.status === 'ready' || t.status === 'failed') return t;
      if (Date.now() > deadline) throw new Error(`template ${slug} still ${t.status}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  it('fails a build that writes past the limit, with ENOSPC in its log', async () => {
    const t = await buildOn('too-big', 'FROM base-ubuntu\nRUN dd if=/dev/zero of=/fill bs=1M count=256');
    expect(t.status).toBe('failed');
    expect(t.error).toMatch(/step 1 .* failed/);
    const log = (await req('GET', '/v1/templates/too-big/logs')).body;
    expect(log).toContain('No space left on device');
  });

  it('builds within the limit, and the layer serves sandboxes (root and /usr)', async () => {
    const t = await buildOn(
      'fits',
      'FROM base-ubuntu\nRUN echo small > /opt/small && mkdir -p /usr/local/share/fits && echo usr > /usr/local/share/fits/mark',
    );
    expect(t.status, t.error).toBe('ready');
    const sbx = await req('POST', '/v1/sandboxes', { template: 'fits', network: false });
    expect(sbx.statusCode, sbx.body).toBe(201);
    const out = await req('POST', `/v1/sandboxes/${json(sbx).data.id}/commands`, { cmd: 'cat /opt/small /usr/local/share/fits/mark' });
    expect(json(out).data.stdout).toBe('small\nusr\n');
  });
});

describe('the free host disk floor for builds', () => {
  let fh: Harness;
  let owner: Actor;
  beforeAll(async () => {
    fh = await createHarness({ HANGAR_SANDBOX_MIN_FREE_DISK_MB: String(1024 * 1024 * 1024) });
    owner = await createOrgAdmin(fh);
  });
  afterAll(() => fh?.close());

  it('refuses a new build with 507 insufficient_storage saying why, and creates no template', async () => {
    const res = await fh.app.inject({
      method: 'POST',
      url: '/v1/templates',
      headers: owner.headers,
      payload: { slug: 'no-room', name: 'No room', dockerfile: 'FROM base-ubuntu\nRUN true' },
    });
    const error = expectError(res, 507, 'insufficient_storage');
    expect(error.message).toContain('HANGAR_SANDBOX_MIN_FREE_DISK_MB');
    const got = await fh.app.inject({ method: 'GET', url: '/v1/templates/no-room', headers: owner.headers });
    expect(got.statusCode).toBe(404);
  });
});
