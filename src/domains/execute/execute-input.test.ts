import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { securitySuite } from '../../../test/security.js';
import { parseConfig } from '../../config.js';
import { createExecutor } from './service.js';

/** Bad input never reaches a sandbox: each refusal is a 400 (413 for size) naming the field. */
describe('execute: bad input', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_BODY_LIMIT_BYTES: String(64 * 1024) });
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h.close());

  const post = (payload: unknown, headers: Record<string, string> = {}) =>
    h.app.inject({ method: 'POST', url: '/v1/execute', headers: { ...admin.headers, ...headers }, payload: payload as object });

  async function refused(payload: unknown, field: string, status = 400) {
    const res = await post(payload);
    expect(res.statusCode, res.body).toBe(status);
    const error = json(res).error;
    expect(error.code).toBe(status === 413 ? 'payload_too_large' : 'invalid_request');
    if (status === 400) {
      expect(error.message).toContain(field);
      expect(error.issues.map((i: { path: string }) => i.path)).toContain(field);
    }
    expect(res.headers['x-execution-id']).toBeUndefined();
    return error.message as string;
  }

  const ok = { language: 'bash', code: 'echo hi' };

  it('an unknown language', async () => {
    const msg = await refused({ ...ok, language: 'cobol' }, 'body.language');
    expect(msg).toContain('unknown language "cobol"');
    expect(msg).toContain('python');
    await refused({ ...ok, language: '' }, 'body.language');
    await refused({ ...ok, language: 42 }, 'body.language');
    await refused({ code: 'x' }, 'body.language');
  });

  it('an unknown version, or one that is not a version', async () => {
    expect(await refused({ ...ok, version: '999.1' }, 'body.version')).toMatch(/no installed bash matches "999.1"; installed: \d+\.\d+/);
    expect(await refused({ ...ok, version: 'latest-and-greatest' }, 'body.version')).toContain('not a version or a semver range');
    await refused({ ...ok, version: '' }, 'body.version');
  });

  it('neither code nor files, or both', async () => {
    expect(await refused({ language: 'bash' }, 'body.code')).toContain('code, or as files');
    await refused({ language: 'bash', files: [] }, 'body.code');
    expect(await refused({ language: 'bash', code: 'echo', files: [{ content: 'echo' }] }, 'body.files')).toContain('not both');
  });

  it('empty, duplicate and reserved file names', async () => {
    expect(await refused({ language: 'bash', files: [{ name: '', content: 'x' }] }, 'body.files.0.name')).toContain('must not be empty');
    const dup = await refused(
      {
        language: 'bash',
        files: [
          { name: 'main.sh', content: 'x' },
          { name: 'lib.sh', content: 'y' },
          { name: 'lib.sh', content: 'z' },
        ],
      },
      'body.files.2.name',
    );
    expect(dup).toContain('files.1');
    // An unnamed first file is the default entry, so naming another file the same is a duplicate too.
    await refused({ language: 'bash', files: [{ content: 'x' }, { name: 'main.sh', content: 'y' }] }, 'body.files.1.name');
    await refused({ language: 'bash', files: [{ content: 'x' }, { name: '.hangar', content: 'y' }] }, 'body.files.1.name');
  });

  it('path separators and .. in names', async () => {
    for (const name of ['a/b.sh', '/etc/passwd', 'dir\\x.sh', '..', '.', '../x.sh', 'a..b', 'x\u0000y', 'tab\there']) {
      const msg = await refused({ language: 'bash', files: [{ content: 'echo' }, { name, content: 'x' }] }, 'body.files.1.name');
      expect(msg, name).toMatch(/separators|"\.\."|control characters/);
    }
    await refused({ language: 'bash', files: [{ name: 'x'.repeat(256), content: 'x' }] }, 'body.files.0.name');
  });

  it('file content that is not what its encoding says', async () => {
    await refused({ language: 'bash', files: [{ content: 'not base64!', encoding: 'base64' }] }, 'body.files.0.content');
    await refused({ language: 'bash', files: [{ content: 'x', encoding: 'hex' }] }, 'body.files.0.encoding');
    await refused({ language: 'bash', files: [{ name: 'x' }] }, 'body.files.0.content');
  });

  it('timeouts above the server maximum, and ones that are not positive integers', async () => {
    const max = h.deps.config.execute;
    expect(await refused({ ...ok, run_timeout: max.maxRunTimeoutMs + 1 }, 'body.run_timeout')).toContain(`at most ${max.maxRunTimeoutMs} ms`);
    expect(await refused({ ...ok, compile_timeout: max.maxCompileTimeoutMs + 1 }, 'body.compile_timeout')).toContain(
      `at most ${max.maxCompileTimeoutMs} ms`,
    );
    for (const bad of [0, -1, 1.5, '100', null]) await refused({ ...ok, run_timeout: bad }, 'body.run_timeout');
  });

  it('memory limits outside the server’s bounds', async () => {
    const { maxMemoryBytes } = h.deps.config.execute;
    await refused({ ...ok, run_memory_limit: maxMemoryBytes + 1 }, 'body.run_memory_limit');
    await refused({ ...ok, compile_memory_limit: maxMemoryBytes + 1 }, 'body.compile_memory_limit');
    await refused({ ...ok, run_memory_limit: 1000 }, 'body.run_memory_limit');
  });

  it('arguments that are not strings, too many, or hold NUL', async () => {
    await refused({ ...ok, args: 'one two' }, 'body.args');
    await refused({ ...ok, args: [1] }, 'body.args.0');
    await refused({ ...ok, args: Array.from({ length: 101 }, () => 'a') }, 'body.args');
    await refused({ ...ok, args: ['fine', 'bad\u0000'] }, 'body.args.1');
  });

  it('a compiled language’s entry must carry its extension', async () => {
    await refused({ language: 'c', files: [{ name: 'main.txt', content: 'int main(){}' }] }, 'body.files.0.name');
  });

  it('a body over the limit is 413', async () => {
    await refused({ ...ok, code: `# ${'x'.repeat(70 * 1024)}` }, '', 413);
  });

  it('a body that is not JSON, or not an object', async () => {
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/execute',
      headers: { ...admin.headers, 'content-type': 'application/json' },
      payload: '{"language":',
    });
    expect(res.statusCode).toBe(400);
    const text = await h.app.inject({
      method: 'POST',
      url: '/v1/execute',
      headers: { ...admin.headers, 'content-type': 'text/plain' },
      payload: 'print(1)',
    });
    expect(text.statusCode).toBe(415);
  });
});

describe('execute: languages an operator turns off, or whose toolchain is missing', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_EXECUTE_LANGUAGES: 'bash,py' });
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h.close());

  it('are absent from GET /v1/runtimes', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/v1/runtimes', headers: admin.headers });
    expect(res.statusCode).toBe(200);
    expect(new Set(json(res).data.map((r: { language: string }) => r.language))).toEqual(new Set(['bash', 'python']));
  });

  it('answer a 400 naming the language, not a crash', async () => {
    for (const language of ['ruby', 'cs', 'java']) {
      const res = await h.app.inject({ method: 'POST', url: '/v1/execute', headers: admin.headers, payload: { language, code: 'x' } });
      expect(res.statusCode).toBe(400);
      expect(json(res).error.message).toMatch(/is not installed on this server; GET \/v1\/runtimes/);
      expect(json(res).error.issues[0].path).toBe('body.language');
    }
  });

  it('an unknown name in HANGAR_EXECUTE_LANGUAGES stops start-up naming the setting', async () => {
    const config = parseConfig({ HANGAR_DATA_DIR: h.dataDir, HANGAR_SECRET_KEY: 'a'.repeat(64), HANGAR_EXECUTE_LANGUAGES: 'python,klingon' });
    await expect(createExecutor({ ...h.deps, config })).rejects.toThrow(/^HANGAR_EXECUTE_LANGUAGES: unknown language "klingon"/);
  });
});

describe('GET /v1/runtimes', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness();
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h.close());

  it('lists each installed version with its aliases, in the envelope', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/v1/runtimes', headers: admin.headers });
    expect(res.statusCode).toBe(200);
    const body = json(res);
    expect(body.meta.requestId).toBeTruthy();
    const bash = body.data.find((r: { language: string }) => r.language === 'bash');
    expect(bash).toEqual({ language: 'bash', version: expect.stringMatching(/^\d+\.\d+\.\d+$/), aliases: ['sh'], runtime: 'bash', compiled: false });
    for (const r of body.data) {
      expect(r.version).toMatch(/^\d+(\.\d+)+$/);
      expect(['python', 'javascript', 'typescript', 'bash', 'c', 'c++', 'go', 'ruby', 'rust', 'java', 'csharp']).toContain(r.language);
    }
  });

  it('is not a 501 any more, nor is POST /v1/execute', async () => {
    expect((await h.app.inject({ method: 'GET', url: '/v1/execute', headers: admin.headers })).statusCode).toBe(405);
    expect((await h.app.inject({ method: 'POST', url: '/v1/runtimes', headers: admin.headers })).statusCode).toBe(405);
  });
});

securitySuite('code execution', [
  { method: 'POST', url: () => '/v1/execute', scope: 'execute:run', body: { language: 'bash', code: 'echo hi' } },
  { method: 'GET', url: () => '/v1/runtimes', scope: null },
]);
