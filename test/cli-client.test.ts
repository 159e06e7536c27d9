import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { CLIENT_COMMANDS } from '../src/client/cli.js';
import { createIsolation } from '../src/platform/isolation/index.js';
import { FakeOpenAI } from './fakes/openai.js';
import { createHarness, createOrgAdmin, type Actor, type Harness } from './harness.js';
import { isolationNeed, itNeeding } from './needs.js';

const BIN = path.resolve(import.meta.dirname, '../bin/hangar.js');
const isolation = await createIsolation();

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

describe('hangar login, whoami, exec, activity against a running server', () => {
  let h: Harness;
  let fake: FakeOpenAI;
  let url: string;
  let a: Actor;
  let b: Actor;
  let dir: string;
  let configDir: string;

  /** Runs the CLI as a user would (a child process; never spawnSync: the server answers from this process). */
  const hangar = (args: string[], opts: { env?: Record<string, string>; input?: string } = {}) =>
    new Promise<Result>((resolve) => {
      const env: Record<string, string> = { PATH: process.env.PATH ?? '', HOME: dir, HANGAR_CONFIG_DIR: configDir, ...opts.env };
      const child = execFile(process.execPath, [BIN, ...args], { env, encoding: 'utf8', timeout: 60_000 }, (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
      child.stdin?.end(opts.input ?? '');
    });

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness({ HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_OPENAI_MODELS: 'm1' });
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    const address = h.app.server.address() as { port: number };
    url = `http://127.0.0.1:${address.port}`;
    a = await createOrgAdmin(h, 'Org A');
    b = await createOrgAdmin(h, 'Org B');
    dir = mkdtempSync(path.join(tmpdir(), 'hangar-client-'));
    configDir = path.join(dir, 'config');
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('login refuses a bad key (the server says why) and saves nothing; a good one is checked and saved 0600', async () => {
    const bad = await hangar(['login', '--base-url', url, '--key', 'hgr_live_not_a_real_key']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/hangar: 401 unauthenticated: .*\(request req_/);
    expect(() => statSync(path.join(configDir, 'credentials.json'))).toThrow();

    // The key on standard input, as a user would paste it.
    const ok = await hangar(['login', '--base-url', url], { input: `${a.key}\n` });
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toContain(`organization Org A (${a.orgId}, admin)`);
    expect(statSync(path.join(configDir, 'credentials.json')).mode & 0o777).toBe(0o600);
    expect(ok.stdout).not.toContain(a.key);

    const who = await hangar(['whoami', '--json']);
    expect(who.code, who.stderr).toBe(0);
    expect(JSON.parse(who.stdout).currentOrganizationId).toBe(a.orgId);
  });

  it('activity shows the organization’s own log and nothing of another’s; --json is the events', async () => {
    // Control: B's log has B's key, seen with B's key.
    const own = await hangar(['activity', '--json'], { env: { HANGAR_API_KEY: b.key, HANGAR_BASE_URL: url } });
    expect(own.code, own.stderr).toBe(0);
    const bEvents = JSON.parse(own.stdout) as { id: string }[];
    expect(bEvents.length).toBeGreaterThan(0);

    const mine = await hangar(['activity', '--json', '--limit', '100']);
    expect(mine.code, mine.stderr).toBe(0);
    const aIds = new Set((JSON.parse(mine.stdout) as { id: string }[]).map((e) => e.id));
    expect(aIds.size).toBeGreaterThan(0);
    for (const e of bEvents) expect(aIds.has(e.id)).toBe(false);

    const human = await hangar(['activity', '--limit', '5']);
    expect(human.code).toBe(0);
    expect(human.stdout.split('\n').filter(Boolean).length).toBeGreaterThan(0);
    expect(human.stdout).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/);

    const badFilter = await hangar(['activity', '--severity', 'loud']);
    expect(badFilter.code).toBe(2);
    expect(badFilter.stderr).toMatch(/hangar: 400 invalid_request: .*severity/);
  });

  itNeeding(isolationNeed(isolation), 'exec prints the program’s output and exits with its exit code', async () => {
    const file = path.join(dir, 'hello.py');
    writeFileSync(file, 'import sys\nprint("to stdout")\nprint("to stderr", file=sys.stderr)\nsys.exit(7)\n');
    const r = await hangar(['exec', file]);
    expect(r.stdout).toBe('to stdout\n');
    expect(r.stderr).toBe('to stderr\n');
    expect(r.code).toBe(7);

    const c = path.join(dir, 'broken.c');
    writeFileSync(c, 'int main(void) { return nope; }\n');
    const compile = await hangar(['exec', c]);
    expect(compile.code).toBe(1);
    expect(compile.stderr).toMatch(/nope.*undeclared/);

    const json = await hangar(['exec', file, '--json']);
    expect(JSON.parse(json.stdout).run).toMatchObject({ code: 7, stdout: 'to stdout\n' });
  });

  it('sandbox create, ls, exec (output as it comes, the exit code), pause, resume, rm; another organization’s key reaches none of it', async () => {
    const created = await hangar(['sandbox', 'create', '--name', 'cli-box', '--json']);
    expect(created.code, created.stderr).toBe(0);
    const sbx = JSON.parse(created.stdout) as { id: string; state: string };
    expect(sbx.state).toBe('running');

    const ls = await hangar(['sandbox', 'ls']);
    expect(ls.stdout).toMatch(new RegExp(`${sbx.id}\\s+running\\s+\\S+\\s+cli-box`));

    const run = await hangar(['sandbox', 'exec', sbx.id, '--', 'echo', 'out; echo err >&2; exit 3']);
    expect(run.stdout).toBe('out\n');
    expect(run.stderr).toBe('err\n');
    expect(run.code).toBe(3);

    // Another organization's key: the sandbox does not exist for it (the owner's calls above are the control).
    const other = await hangar(['sandbox', 'exec', sbx.id, '--', 'true'], { env: { HANGAR_API_KEY: b.key, HANGAR_BASE_URL: url } });
    expect(other.code).toBe(2);
    expect(other.stderr).toMatch(/hangar: 404 not_found/);
    expect((await hangar(['sandbox', 'ls', '--json'], { env: { HANGAR_API_KEY: b.key, HANGAR_BASE_URL: url } })).stdout).toBe('[]\n');

    // cp both ways, bytes intact (not UTF-8 text), and to stdout.
    const local = path.join(dir, 'blob.bin');
    const bytes = Buffer.from([0, 1, 2, 250, 251, 255, 10, 13]);
    writeFileSync(local, bytes);
    const up = await hangar(['sandbox', 'cp', local, `${sbx.id}:data/blob.bin`]);
    expect(up.code, up.stderr).toBe(0);
    const seen = await hangar(['sandbox', 'exec', sbx.id, '--', 'wc -c < data/blob.bin']);
    expect(seen.stdout.trim()).toBe('8');
    const back = path.join(dir, 'back.bin');
    expect((await hangar(['sandbox', 'cp', `${sbx.id}:data/blob.bin`, back])).code).toBe(0);
    expect(readFileSync(back).equals(bytes)).toBe(true);
    await hangar(['sandbox', 'exec', sbx.id, '--', 'echo', 'hi there > note.txt']);
    expect((await hangar(['sandbox', 'cp', `${sbx.id}:note.txt`, '-'])).stdout).toBe('hi there\n');
    const missing = await hangar(['sandbox', 'cp', `${sbx.id}:nope.txt`, '-']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/hangar: 404/);

    expect((await hangar(['sandbox', 'pause', sbx.id])).stdout).toContain(`${sbx.id} paused`);
    const paused = await hangar(['sandbox', 'exec', sbx.id, '--', 'true']);
    expect(paused.code).toBe(2);
    expect(paused.stderr).toMatch(/409 invalid_state/);
    expect((await hangar(['sandbox', 'resume', sbx.id])).stdout).toContain(`${sbx.id} running`);
    expect((await hangar(['sandbox', 'rm', sbx.id])).code).toBe(0);
    expect((await hangar(['sandbox', 'ls'])).stdout).not.toContain(sbx.id);
  }, 90_000); // a dozen CLI processes, each a Node start: slow on a loaded 2-core machine

  it('run streams the agent’s answer to stdout as it comes, the end to stderr, and exits 0 when it completed', async () => {
    const created = await h.app.inject({
      method: 'POST',
      url: '/v1/agents',
      headers: a.headers,
      payload: { slug: 'terse', model: 'm1', instructions: 'You are terse.' },
    });
    expect(created.statusCode, created.body).toBe(201);
    fake.script({ text: ['Hello', ', ', 'world.'], usage: { prompt: 5, completion: 3 } });
    const r = await hangar(['run', 'terse', 'Say', 'hello']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('Hello, world.\n');
    expect(r.stderr).toMatch(/^run \S+ completed \(thread \S+\)$/m);
    const threadId = /\(thread (\S+)\)/.exec(r.stderr)![1]!;
    // The prompt reached the model, and the run is on the thread the CLI names.
    expect(JSON.stringify(fake.requests.at(-1)!.body)).toContain('Say hello');
    const events = await h.app.inject({ method: 'GET', url: `/v1/threads/${threadId}/events`, headers: a.headers });
    expect(events.body).toContain('Hello, world.');

    fake.script({ status: 400, errorMessage: 'the model refuses' });
    const failed = await hangar(['run', 'terse', 'again', '--json']);
    expect(failed.code).toBe(1);
    expect(JSON.parse(failed.stdout).status).toBe('failed');

    const unknown = await hangar(['run', 'nobody', 'hi'], { env: { HANGAR_API_KEY: b.key, HANGAR_BASE_URL: url } });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/hangar: 404 not_found/);
    const othersAgent = await hangar(['run', 'terse', 'hi'], { env: { HANGAR_API_KEY: b.key, HANGAR_BASE_URL: url } });
    expect(othersAgent.code).toBe(2);
    expect(othersAgent.stderr).toMatch(/hangar: 404 not_found/);
  });

  it('threads tail shows the history, then follows the thread live; --no-follow stops after the history; another organization is refused', async () => {
    fake.script({ text: ['First ', 'answer.'] });
    const first = await hangar(['run', 'terse', 'one']);
    expect(first.code, first.stderr).toBe(0);
    const threadId = /\(thread (\S+)\)/.exec(first.stderr)![1]!;

    const once = await hangar(['threads', 'tail', threadId, '--no-follow']);
    expect(once.code, once.stderr).toBe(0);
    expect(once.stdout).toBe('> one\nFirst answer.\n');
    expect(once.stderr).toContain(`── thread ${threadId}`);

    // Follow: a second run on the thread streams into the tail as it happens.
    const env: Record<string, string> = { PATH: process.env.PATH ?? '', HOME: dir, HANGAR_CONFIG_DIR: configDir };
    const tail = spawn(process.execPath, [BIN, 'threads', 'tail', threadId], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    tail.stdout.on('data', (d) => (out += d));
    tail.stderr.on('data', (d) => (err += d));
    try {
      await vi.waitFor(() => expect(out).toContain('First answer.'), { timeout: 20_000, interval: 100 });
      fake.script({ text: ['Second ', 'answer.'] });
      const second = await hangar(['run', 'terse', 'two', '--thread', threadId]);
      expect(second.code, second.stderr).toBe(0);
      await vi.waitFor(() => expect(err).toMatch(/── run \S+ completed/), { timeout: 20_000, interval: 100 });
      expect(out).toBe('> one\nFirst answer.\n> two\nSecond answer.\n');
    } finally {
      tail.kill('SIGTERM');
    }

    const refused = await hangar(['threads', 'tail', threadId, '--no-follow'], { env: { HANGAR_API_KEY: b.key, HANGAR_BASE_URL: url } });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/hangar: the server closed the thread's stream: 4404/);
  });

  it('template create streams the build log to stderr and exits 0 when ready (1 with the reason when it failed); ls, logs, rm; --json parses', async () => {
    const dockerfile = path.join(dir, 'Dockerfile');
    writeFileSync(dockerfile, 'FROM base-ubuntu\nRUN echo cli-build-output-$((6 * 7))\n');
    const built = await hangar(['template', 'create', '--name', 'cli-tpl', '--dockerfile', dockerfile]);
    expect(built.code, built.stderr).toBe(0);
    // The RUN step's output (computed in the build, so not an echo of the Dockerfile) came through the stream.
    expect(built.stderr.split('\n')).toContain('cli-build-output-42');
    expect(built.stderr).toMatch(/Template cli-tpl is ready/);
    expect(built.stdout).toMatch(/^cli-tpl ready \(tpl_\S+, on base-ubuntu\)\n$/);

    // A failing step: exit 1, the reason on stderr; --json prints the template as it ended.
    const failing = path.join(dir, 'failing.yaml');
    writeFileSync(failing, 'name: Failing one\ndockerfile: |\n  FROM base-ubuntu\n  RUN echo before-failing && false\n');
    const failed = await hangar(['template', 'create', '--name', 'cli-broken', '--config', failing, '--json']);
    expect(failed.code, failed.stderr).toBe(1);
    expect(failed.stderr.split('\n')).toContain('before-failing');
    expect(failed.stderr).toMatch(/^hangar: the build of cli-broken failed: step 1 \(RUN .*\) failed/m);
    const failedTpl = JSON.parse(failed.stdout) as { slug: string; name: string; status: string; error: string };
    expect(failedTpl).toMatchObject({ slug: 'cli-broken', name: 'Failing one', status: 'failed' });
    expect(failed.stderr).toContain(failedTpl.error);

    const ls = await hangar(['template', 'ls']);
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout).toMatch(/^cli-tpl\s+ready\s+dockerfile\s+\S+\s+cli-tpl$/m);
    expect(ls.stdout).toMatch(/^cli-broken\s+failed\s+dockerfile\s+\S+\s+Failing one$/m);
    expect(ls.stdout).toMatch(/^base-ubuntu\s+ready\s+system\b/m);
    const lsJson = JSON.parse((await hangar(['template', 'ls', '--json'])).stdout) as { slug: string; status: string }[];
    expect(lsJson.find((t) => t.slug === 'cli-tpl')?.status).toBe('ready');
    // Another organization sees neither (the system templates only).
    const others = JSON.parse((await hangar(['template', 'ls', '--json'], { env: { HANGAR_API_KEY: b.key, HANGAR_BASE_URL: url } })).stdout) as {
      slug: string;
    }[];
    expect(others.length).toBeGreaterThan(0);
    expect(others.map((t) => t.slug)).not.toContain('cli-tpl');

    // logs: the whole log as text; --follow replays it (an ended build) and exits as the build did.
    const logs = await hangar(['template', 'logs', 'cli-tpl']);
    expect(logs.code, logs.stderr).toBe(0);
    expect(logs.stdout.split('\n')).toContain('cli-build-output-42');
    const followed = await hangar(['template', 'logs', 'cli-tpl', '--follow']);
    expect(followed.code, followed.stderr).toBe(0);
    expect(followed.stdout).toBe(logs.stdout);
    const followedFailed = await hangar(['template', 'logs', 'cli-broken', '--follow']);
    expect(followedFailed.code).toBe(1);
    expect(followedFailed.stderr).toContain(failedTpl.error);

    // --no-follow: the created template at once, pending or building.
    const quick = await hangar(['template', 'create', '--name', 'cli-quick', '--dockerfile', dockerfile, '--no-follow', '--json']);
    expect(quick.code, quick.stderr).toBe(0);
    expect(JSON.parse(quick.stdout)).toMatchObject({ slug: 'cli-quick', name: 'cli-quick' });
    expect(quick.stderr).toBe('');
    expect((await hangar(['template', 'logs', 'cli-quick', '--follow'])).code).toBe(0);

    // API errors and usage errors: exit 2, one line.
    const dup = await hangar(['template', 'create', '--name', 'cli-tpl', '--dockerfile', dockerfile]);
    expect(dup.code).toBe(2);
    expect(dup.stderr).toMatch(/^hangar: 409 \S+: .*\(request req_/);
    const badFile = path.join(dir, 'Bad.dockerfile');
    writeFileSync(badFile, 'FROM base-ubuntu\nCOPY . /app\n');
    const refused = await hangar(['template', 'create', '--name', 'cli-bad', '--dockerfile', badFile]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/^hangar: 400 \S+: .*COPY/);
    const noSource = await hangar(['template', 'create', '--name', 'cli-none']);
    expect(noSource.code).toBe(2);
    expect(noSource.stderr).toContain('nothing to build');
    const missing = await hangar(['template', 'logs', 'no-such-template']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/hangar: 404 not_found/);

    // rm: gone from ls; a system template cannot be removed.
    const rm = await hangar(['template', 'rm', 'cli-tpl', '--json']);
    expect(rm.code, rm.stderr).toBe(0);
    expect(JSON.parse(rm.stdout)).toEqual({ slug: 'cli-tpl', deleted: true });
    expect((await hangar(['template', 'rm', 'cli-broken'])).stdout).toBe('cli-broken deleted\n');
    expect((await hangar(['template', 'ls'])).stdout).not.toMatch(/^cli-(tpl|broken)\s/m);
    const system = await hangar(['template', 'rm', 'base-ubuntu']);
    expect(system.code).toBe(2);
    expect(system.stderr).toMatch(/hangar: 403 /);
  }, 240_000);

  it('bin/hangar.js sends every client command to the light entry, and `hangar help` lists them', async () => {
    const bin = readFileSync(BIN, 'utf8');
    const listed = /\[([^\]]*)\]\.includes\(command\)/.exec(bin)?.[1] ?? '';
    expect(new Set([...listed.matchAll(/'([a-z]+)'/g)].map((m) => m[1]))).toEqual(CLIENT_COMMANDS);
    expect(bin).toContain("(command === 'threads' && rest[0] === 'tail')");
    const help = await hangar(['help']);
    for (const c of [...CLIENT_COMMANDS, 'threads tail']) expect(help.stdout).toContain(`  ${c} `);
  });

  it('exec without a known extension asks for --language; logout forgets the credential', async () => {
    const file = path.join(dir, 'script.unknown');
    writeFileSync(file, 'print(1)\n');
    const r = await hangar(['exec', file]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('pass --language');
    expect((await hangar(['logout'])).code).toBe(0);
    const after = await hangar(['whoami']);
    expect(after.code).toBe(2);
    expect(after.stderr).toContain('not logged in');
  });
});
