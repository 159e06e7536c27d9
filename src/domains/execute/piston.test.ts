import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { describeNeeding, isolationNeed, itNeeding, toolchainNeed } from '../../../test/needs.js';
import { createIsolation } from '../../platform/isolation/index.js';
import { findLanguage } from './languages.js';
import { detectInstalled } from './service.js';

/**
 * The Piston-compatible routes (ADR 0043): a Piston client that changes only its URL and adds an API key gets
 * Piston's answers, from the same execution path as POST /v1/execute.
 */

const isolation = await createIsolation();
const installed = await detectInstalled();
const has = (language: string) => (installed.get(findLanguage(language)!)?.length ?? 0) > 0;
const PROGRAMS = fileURLToPath(new URL('../../../test/piston/', import.meta.url));

interface Runtime {
  language: string;
  version: string;
  aliases: string[];
  runtime?: string;
}

describe('Piston API v2: requests it refuses, and who may call it', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_BODY_LIMIT_BYTES: String(64 * 1024) });
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h.close());

  const post = (payload: unknown, headers: Record<string, string> = admin.headers) =>
    h.app.inject({ method: 'POST', url: '/api/v2/execute', headers, payload: payload as object });

  /** A 400 with exactly Piston's body, `{ message }`. */
  async function refused(payload: unknown, message: string | RegExp, status = 400) {
    const res = await post(payload);
    expect(res.statusCode, res.body).toBe(status);
    const body = json(res);
    expect(Object.keys(body)).toEqual(['message']);
    if (typeof message === 'string') expect(body.message).toBe(message);
    else expect(body.message).toMatch(message);
    expect(res.headers['x-execution-id']).toBeUndefined();
  }

  const ok = { language: 'bash', version: '*', files: [{ content: 'echo hi' }] };

  it('an unknown language or version is 400 "<language>-<version> runtime is unknown"', async () => {
    await refused({ ...ok, language: 'cobol', version: '3.1.2' }, 'cobol-3.1.2 runtime is unknown');
    await refused({ ...ok, version: '999' }, 'bash-999 runtime is unknown');
    await refused({ ...ok, version: 'not a range' }, 'bash-not a range runtime is unknown');
    // Piston takes no "latest": only semver ranges and exact versions.
    await refused({ ...ok, version: 'latest' }, 'bash-latest runtime is unknown');
  });

  it('missing and mistyped fields, in the order and words Piston checks them', async () => {
    await refused({ version: '*', files: [] }, 'language is required as a string');
    await refused({ ...ok, language: 42 }, 'language is required as a string');
    await refused({ ...ok, language: '' }, 'language is required as a string');
    await refused({ language: 'bash', files: [] }, 'version is required as a string');
    await refused({ ...ok, version: 3 }, 'version is required as a string');
    await refused({ language: 'bash', version: '*' }, 'files is required as an array');
    await refused({ ...ok, files: 'echo hi' }, 'files is required as an array');
    await refused({ ...ok, files: [{ content: 'echo' }, { content: 7 }] }, 'files[1].content is required as a string');
    await refused({ ...ok, files: [{ name: 'x.sh' }] }, 'files[0].content is required as a string');
    await refused({ ...ok, files: [] }, 'files must include at least one utf8 encoded file');
    await refused({ ...ok, files: [{ content: 'ZWNobw==', encoding: 'base64' }] }, 'files must include at least one utf8 encoded file');
    await refused({ ...ok, run_timeout: '3000' }, 'If specified, run_timeout must be a number');
    await refused({ ...ok, compile_memory_limit: [1] }, 'If specified, compile_memory_limit must be a number');
    await refused({ ...ok, run_timeout: 10_000_000 }, 'run_timeout cannot exceed the configured limit of 30000');
    await refused({ ...ok, run_cpu_time: -5 }, 'run_cpu_time must be non-negative');
    await refused({ ...ok, stdin: 5 }, 'If specified, stdin must be a string');
    await refused({ ...ok, args: 'a b' }, 'If specified, args must be an array');
    await refused({ ...ok, args: [1] }, 'args must be an array of strings');
    await refused([ok], 'the request body must be a JSON object');
  });

  it('what Hangar refuses besides is a 400 { message } naming the field as Piston would', async () => {
    await refused({ ...ok, files: [{ name: '../etc/passwd', content: 'x' }] }, /^files\[0\]\.name: /);
    await refused({ ...ok, run_memory_limit: 1000 }, /^run_memory_limit: must be at least 1048576 bytes/);
  });

  it('junk never gets a 5xx: huge, deep, wrong content type', async () => {
    const huge = await post({ ...ok, files: [{ content: 'x'.repeat(100 * 1024) }] });
    expect(huge.statusCode).toBe(413);
    expect(Object.keys(json(huge))).toEqual(['message']);
    let deep: unknown = 'x';
    for (let i = 0; i < 2000; i++) deep = [deep];
    const raw = (payload: string, contentType = 'application/json') =>
      h.app.inject({ method: 'POST', url: '/api/v2/execute', headers: { ...admin.headers, 'content-type': contentType }, payload });
    const nested = await raw(`{"language":"bash","version":"*","files":[{"content":"x"}],"args":${JSON.stringify(deep)}}`);
    expect(nested.statusCode).toBe(400);
    expect(json(nested).message).toEqual(expect.any(String));
    const text = await raw('print(1)', 'text/plain');
    expect(text.statusCode).toBe(415);
    expect(Object.keys(json(text))).toEqual(['message']);
    const broken = await raw('{"language":');
    expect(Object.keys(json(broken))).toEqual(['message']);
    expect(broken.statusCode).toBe(400);
    for (const junk of [null, 0, 'x', true, {}, { language: { a: 1 } }, { ...ok, files: [null] }, { ...ok, files: [[]] }, { ...ok, version: '>' }]) {
      const res = await post(junk);
      expect(res.statusCode, JSON.stringify(junk)).toBeLessThan(500);
      expect(res.statusCode, JSON.stringify(junk)).not.toBe(200);
      expect(json(res).message, JSON.stringify(junk)).toEqual(expect.any(String));
    }
  });

  it('needs an API key (401) with the execute:run scope (403), answered as { message }', async () => {
    // Control: the same key lists runtimes, which needs no scope.
    const limited = await keyFor(h, admin, ['activity:read']);
    const list = await h.app.inject({ method: 'GET', url: '/api/v2/runtimes', headers: { 'x-api-key': limited } });
    expect(list.statusCode).toBe(200);
    const forbidden = await post(ok, { 'x-api-key': limited });
    expect(forbidden.statusCode).toBe(403);
    expect(json(forbidden)).toEqual({ message: expect.stringContaining('execute:run') });
    for (const headers of [{}, { 'x-api-key': 'hgr_live_nope' }] as Record<string, string>[]) {
      const res = await post(ok, headers);
      expect(res.statusCode).toBe(401);
      expect(Object.keys(json(res))).toEqual(['message']);
    }
    const anon = await h.app.inject({ method: 'GET', url: '/api/v2/runtimes' });
    expect(anon.statusCode).toBe(401);
    expect(Object.keys(json(anon))).toEqual(['message']);
  });

  it('GET /api/v2/runtimes lists each installed version with Piston’s aliases and runtime', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/api/v2/runtimes', headers: admin.headers });
    expect(res.statusCode).toBe(200);
    const runtimes = json<Runtime[]>(res);
    expect(Array.isArray(runtimes)).toBe(true);
    for (const rt of runtimes)
      expect(Object.keys(rt).sort()).toEqual(rt.runtime ? ['aliases', 'language', 'runtime', 'version'] : ['aliases', 'language', 'version']);
    const of = (language: string) => runtimes.find((r) => r.language === language);
    if (has('python')) {
      const py = of('python')!;
      expect(py.aliases).toEqual(expect.arrayContaining(['py', 'py3', 'python3', `python${py.version.split('.').slice(0, 2).join('.')}`]));
      expect(py.runtime).toBeUndefined();
    }
    if (has('javascript'))
      expect(of('javascript')).toMatchObject({ runtime: 'node', aliases: expect.arrayContaining(['node-js', 'node-javascript', 'js']) });
    if (has('typescript')) expect(of('typescript')!.aliases).toEqual(expect.arrayContaining(['ts', 'deno', 'deno-ts', 'node-ts']));
    if (has('c')) expect(of('c')).toMatchObject({ runtime: 'gcc', aliases: ['gcc'] });
    if (has('c++')) expect(of('c++')).toMatchObject({ runtime: 'gcc', aliases: expect.arrayContaining(['cpp', 'g++']) });
    if (has('csharp'))
      expect(of('csharp')).toMatchObject({ runtime: 'mono', aliases: expect.arrayContaining(['mono-csharp', 'mono-cs', 'c#', 'cs']) });
  });

  it('a path under /api/v2 that is not a route is still a 404', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/api/v2/packages', headers: admin.headers });
    expect(res.statusCode).toBe(404);
  });
});

describeNeeding(isolationNeed(isolation), 'Piston API v2: running programs', () => {
  let h: Harness;
  let admin: Actor;
  let runtimes: Runtime[];
  beforeAll(async () => {
    h = await createHarness({ HANGAR_EXECUTE_OUTPUT_LIMIT_BYTES: '4096' });
    admin = await createOrgAdmin(h);
    runtimes = json(await h.app.inject({ method: 'GET', url: '/api/v2/runtimes', headers: admin.headers }));
  });
  afterAll(() => h?.close());

  const execute = async (payload: Record<string, unknown>) => {
    const res = await h.app.inject({ method: 'POST', url: '/api/v2/execute', headers: admin.headers, payload });
    expect(res.statusCode, res.body).toBe(200);
    return { ...json(res), id: res.headers['x-execution-id'] as string };
  };
  const python = (code: string, extra: Record<string, unknown> = {}) =>
    execute({ language: 'python', version: '*', files: [{ content: code }], ...extra });

  // Each package test as Piston's CI runs it: the language is the file's extension, the version exact, and the
  // CLI's request (`piston run <ext> -l <version> test.<ext>`): the file by its base name, utf8, its default timeouts.
  for (const file of readdirSync(PROGRAMS).sort()) {
    const ext = path.extname(file).slice(1);
    itNeeding(
      toolchainNeed(ext, installed.get(findLanguage(ext)!)),
      `${file} prints OK`,
      async () => {
        const rt = runtimes.find((r) => r.language === ext || r.aliases.includes(ext))!;
        const body = await execute({
          language: ext,
          version: rt.version,
          files: [{ name: file, content: readFileSync(path.join(PROGRAMS, file), 'utf8'), encoding: 'utf8' }],
          args: [],
          stdin: '',
          compile_timeout: 10000,
          run_timeout: 3000,
        });
        expect(body.run.stdout.trim(), JSON.stringify(body)).toBe('OK');
        expect(body).toMatchObject({ language: rt.language, version: rt.version });
        expect(body.run).toMatchObject({ code: 0, signal: null, status: null, message: null, output: body.run.stdout });
        if (body.compile) expect(body.compile).toMatchObject({ code: 0, status: null });
      },
      60_000,
    );
  }

  itNeeding(toolchainNeed('python', installed.get(findLanguage('python')!)), 'an unnamed file, Piston’s stage fields', async () => {
    const body = await python('print("OK")');
    expect(Object.keys(body.run)).toEqual(['stdout', 'stderr', 'output', 'code', 'signal', 'message', 'status', 'cpu_time', 'wall_time', 'memory']);
    expect(body.compile).toBeUndefined();
    expect(body.run).toMatchObject({ stdout: 'OK\n', stderr: '', output: 'OK\n', code: 0, signal: null, message: null, status: null });
    expect(body.run.wall_time).toBeGreaterThan(0);
    expect(body.run.memory).toBeGreaterThan(1024 * 1024);
  });

  itNeeding(
    toolchainNeed('python', installed.get(findLanguage('python')!)),
    'aliases and version ranges resolve as Piston resolves them',
    async () => {
      const py = runtimes.find((r) => r.language === 'python')!;
      const [major, minor] = py.version.split('.');
      for (const [language, version] of [
        ['py3', '*'],
        ['py', `${major}`],
        ['python3', `${major}.${minor}`],
        [`python${major}.${minor}`, `>=${major}.0.0`],
        ['python', `^${py.version}`],
        ['python', py.version],
      ]) {
        const body = await execute({ language, version, files: [{ content: 'print("OK")' }] });
        expect(body, `${language} ${version}`).toMatchObject({ language: 'python', version: py.version, run: { stdout: 'OK\n' } });
      }
      const res = await h.app.inject({
        method: 'POST',
        url: '/api/v2/execute',
        headers: admin.headers,
        payload: { language: 'py3', version: `>${py.version}`, files: [{ content: 'print(1)' }] },
      });
      expect(res.statusCode).toBe(400);
      expect(json(res)).toEqual({ message: `py3->${py.version} runtime is unknown` });
    },
  );

  itNeeding(
    toolchainNeed('javascript', installed.get(findLanguage('javascript')!)),
    'node-js, deno-js and deno run on this server’s Node',
    async () => {
      expect(await execute({ language: 'node-js', version: '*', files: [{ content: 'console.log("OK")' }] })).toMatchObject({
        language: 'javascript',
        run: { stdout: 'OK\n' },
      });
      if (has('typescript')) {
        expect(await execute({ language: 'deno', version: '*', files: [{ content: 'const s: string = "OK";\nconsole.log(s);' }] })).toMatchObject({
          language: 'typescript',
          run: { stdout: 'OK\n' },
        });
      }
    },
  );

  itNeeding(
    toolchainNeed('csharp', installed.get(findLanguage('csharp')!)),
    'mono-csharp runs C#',
    async () => {
      const body = await execute({
        language: 'mono-csharp',
        version: '*',
        files: [{ content: 'public class P { public static void Main() { System.Console.WriteLine("OK"); } }' }],
      });
      expect(body).toMatchObject({ language: 'csharp', compile: { code: 0 }, run: { stdout: 'OK\n', code: 0 } });
    },
    60_000,
  );

  itNeeding(
    toolchainNeed('python', installed.get(findLanguage('python')!)),
    'output interleaves stdout and stderr in the order written',
    async () => {
      const code = [
        'import sys, time',
        'for i in range(4):',
        '    sys.stdout.write(f"out{i}\\n"); sys.stdout.flush(); time.sleep(0.1)',
        '    sys.stderr.write(f"err{i}\\n"); sys.stderr.flush(); time.sleep(0.1)',
      ].join('\n');
      const body = await python(code);
      expect(body.run.stdout).toBe('out0\nout1\nout2\nout3\n');
      expect(body.run.stderr).toBe('err0\nerr1\nerr2\nerr3\n');
      expect(body.run.output).toBe('out0\nerr0\nout1\nerr1\nout2\nerr2\nout3\nerr3\n');
    },
  );

  itNeeding(toolchainNeed('python', installed.get(findLanguage('python')!)), 'stdin gets a final newline as Piston adds it; args', async () => {
    const echo = 'import sys\nprint(repr(sys.stdin.read()))';
    expect((await python(echo, { stdin: 'abc' })).run.stdout).toBe("'abc\\n'\n");
    expect((await python(echo, { stdin: 'abc\n' })).run.stdout).toBe("'abc\\n'\n");
    expect((await python(echo)).run.stdout).toBe("'\\n'\n");
    expect((await python(echo, { stdin: null })).run.stdout).toBe("'\\n'\n");
    const args = await python('import sys\nprint(sys.argv[1:])', { args: ['1', 'two words', ''] });
    expect(args.run.stdout).toBe("['1', 'two words', '']\n");
  });

  itNeeding(
    toolchainNeed('python', installed.get(findLanguage('python')!)),
    '-1 limits are this server’s maximum; 0 and null the defaults',
    async () => {
      const body = await python('print("OK")', {
        run_timeout: -1,
        compile_timeout: -1,
        run_memory_limit: -1,
        compile_memory_limit: -1,
        run_cpu_time: -1,
      });
      expect(body.run).toMatchObject({ stdout: 'OK\n', status: null });
      expect((await python('print("OK")', { run_timeout: 0, run_memory_limit: null })).run.stdout).toBe('OK\n');
      // A program that allocates 300 MB: more than the default memory limit, less than the maximum.
      const big = 'b = bytearray(300 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint("OK")';
      expect((await python(big, { run_memory_limit: -1 })).run.stdout).toBe('OK\n');
      const killed = (await python(big)).run;
      expect(killed.status).not.toBeNull();
      expect(killed.stdout).toBe('');
    },
  );

  itNeeding(toolchainNeed('python', installed.get(findLanguage('python')!)), 'a timeout is SIGKILL with status TO', async () => {
    const body = await python('print("start", flush=True)\nwhile True: pass', { run_timeout: 500 });
    expect(body.run).toMatchObject({ stdout: 'start\n', output: 'start\n', code: null, signal: 'SIGKILL', status: 'TO' });
    expect(body.run.message).toMatch(/limit/);
    const cpu = await python('while True: pass', { run_timeout: 5000, run_cpu_time: 300 });
    expect(cpu.run).toMatchObject({ signal: 'SIGKILL', status: 'TO' });
    expect(cpu.run.wall_time).toBeLessThan(4000);
  });

  itNeeding(
    toolchainNeed('python', installed.get(findLanguage('python')!)),
    'exit codes, signals and output over the limit in Piston’s status letters',
    async () => {
      expect((await python('import sys\nprint("x")\nsys.exit(3)')).run).toMatchObject({
        code: 3,
        signal: null,
        status: 'RE',
        message: 'Exited with error status 3',
      });
      expect((await python('import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)')).run).toMatchObject({
        code: null,
        signal: 'SIGSEGV',
        status: 'SG',
      });
      const long = (await python('print("x" * 10000)')).run;
      expect(long).toMatchObject({ status: 'OL', message: 'stdout length exceeded' });
      expect(long.stdout.length).toBe(4096);
      expect((await python('import sys\nsys.stderr.write("y" * 10000)')).run).toMatchObject({ status: 'EL', message: 'stderr length exceeded' });
    },
  );

  itNeeding(toolchainNeed('c', installed.get(findLanguage('c')!)), 'a failed compile is both compile and run, as Piston answers', async () => {
    const body = await execute({ language: 'c', version: '*', files: [{ content: 'int main(void) { return undefined_name; }' }] });
    expect(body.compile).toMatchObject({ code: 1, status: 'RE', stdout: '' });
    expect(body.compile.stderr).toContain('undefined_name');
    expect(body.compile.output).toBe(body.compile.stderr);
    expect(body.run).toEqual(body.compile);
  });

  itNeeding(toolchainNeed('python', installed.get(findLanguage('python')!)), 'metered and recorded as POST /v1/execute is', async () => {
    const body = await python('print("OK")');
    expect(body.id).toMatch(/^cex_/);
    const res = await h.app.inject({ method: 'GET', url: `/v1/activity?code_execution_id=${body.id}`, headers: admin.headers });
    const events = json(res).data.events;
    expect(events.map((e: { eventType: string }) => e.eventType)).toEqual(['code_execution.completed', 'code_execution.started']);
    expect(events[0]).toMatchObject({ actorUserId: admin.userId, metadata: { language: 'python', version: body.version, outcome: 'exited' } });
  });

  itNeeding(
    toolchainNeed('python', installed.get(findLanguage('python')!)),
    'files: hex and base64 data beside the entry, which is the first utf8 file',
    async () => {
      const body = await execute({
        language: 'python',
        version: '*',
        files: [
          { name: 'data.bin', content: Buffer.from('hex data').toString('hex'), encoding: 'hex' },
          { name: 'main.py', content: 'print(open("data.bin").read(), open("b64.txt").read())' },
          { name: 'b64.txt', content: Buffer.from('b64 data').toString('base64'), encoding: 'base64' },
        ],
      });
      expect(body.run.stdout).toBe('hex data b64 data\n');
    },
  );
});
