import net, { type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';

const BODY_LIMIT = 2048;

describe('HTTP conventions', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_BODY_LIMIT_BYTES: String(BODY_LIMIT) });
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h.close());

  /** The one error envelope: exactly code, message and requestId (plus issues), the id matching the header. */
  function expectError(res: { statusCode: number; headers: Record<string, unknown>; body: string }, status: number, code: string) {
    expect(res.statusCode, res.body).toBe(status);
    expect(res.headers['x-api-version']).toBe('v1');
    expect(String(res.headers['content-type'])).toMatch(/^application\/json/);
    const body = json(res);
    expect(Object.keys(body)).toEqual(['error']);
    const allowed = ['code', 'message', 'requestId', 'issues'];
    expect(Object.keys(body.error).every((k) => allowed.includes(k))).toBe(true);
    expect(body.error.code).toBe(code);
    expect(body.error.message).toEqual(expect.any(String));
    expect(body.error.message.length).toBeGreaterThan(0);
    expect(body.error.requestId).toBe(res.headers['x-request-id']);
    return body.error as { code: string; message: string; requestId: string; issues?: { path: string; message: string }[] };
  }

  it('every /v1 success carries X-API-Version: v1 and the request id in meta', async () => {
    for (const [method, url] of [
      ['GET', '/v1/me'],
      ['GET', '/v1/api-keys'],
      ['GET', '/v1/activity'],
      ['GET', '/v1/organizations'],
    ] as const) {
      const res = await h.app.inject({ method, url, headers: admin.headers });
      expect(res.statusCode, url).toBe(200);
      expect(res.headers['x-api-version']).toBe('v1');
      expect(json(res).meta.requestId).toBe(res.headers['x-request-id']);
    }
    const created = await h.app.inject({ method: 'POST', url: '/v1/api-keys', headers: admin.headers, payload: { name: 'v', scopes: ['org:read'] } });
    expect(created.statusCode).toBe(201);
    expect(created.headers['x-api-version']).toBe('v1');
  });

  it('a JSON body nested deeper than 128 levels is a 400 naming the field, before any handler sees it', async () => {
    // Fields typed "any JSON" (run metadata) were stored as given and serialised later: deep enough, that is a 500.
    const deep = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/run',
      headers: { ...admin.headers, 'content-type': 'application/json' },
      payload: `{"agent":"no-such-agent","prompt":"hi","metadata":{"k":${deep(300)}}}`,
    });
    const error = expectError(res, 400, 'invalid_request');
    expect(error.issues).toEqual([expect.objectContaining({ path: 'body.metadata' })]);
    expect(error.message).toMatch(/nested more than 128/);
    // Ordinary nesting reaches the handler (which then finds no such agent).
    const shallow = await h.app.inject({
      method: 'POST',
      url: '/v1/run',
      headers: { ...admin.headers, 'content-type': 'application/json' },
      payload: `{"agent":"no-such-agent","prompt":"hi","metadata":{"k":${deep(20)}}}`,
    });
    expectError(shallow, 404, 'not_found');
  });

  it('an unknown route is 404 in the envelope', async () => {
    for (const url of ['/v1/nothing-here', '/v1/api-keys/abc/def', '/v1']) {
      const withKey = await h.app.inject({ method: 'GET', url, headers: admin.headers });
      expect(expectError(withKey, 404, 'not_found').message).toContain(url);
      expectError(await h.app.inject({ method: 'GET', url }), 404, 'not_found');
    }
  });

  it('a known path with the wrong method is 405 with an Allow header', async () => {
    const res = await h.app.inject({ method: 'DELETE', url: '/v1/me', headers: admin.headers });
    expectError(res, 405, 'method_not_allowed');
    expect(String(res.headers.allow).split(', ')).toContain('GET');

    const keys = await h.app.inject({ method: 'PATCH', url: '/v1/api-keys', headers: admin.headers });
    expectError(keys, 405, 'method_not_allowed');
    expect(String(keys.headers.allow).split(', ')).toEqual(expect.arrayContaining(['GET', 'POST']));

    const one = await h.app.inject({ method: 'PUT', url: '/v1/api-keys/some-id?x=1' });
    expectError(one, 405, 'method_not_allowed');
    expect(String(one.headers.allow).split(', ')).toEqual(expect.arrayContaining(['GET', 'DELETE']));

    const slash = await h.app.inject({ method: 'POST', url: '/v1/me/' });
    expectError(slash, 405, 'method_not_allowed');
  });

  it('401 and 403 carry the version header and the envelope', async () => {
    expectError(await h.app.inject({ method: 'GET', url: '/v1/me' }), 401, 'unauthenticated');
    expectError(await h.app.inject({ method: 'GET', url: '/v1/me', headers: { 'x-api-key': 'nope' } }), 401, 'unauthenticated');
    const narrow = await keyFor(h, admin, ['org:read']);
    const forbidden = expectError(await h.app.inject({ method: 'GET', url: '/v1/activity', headers: { 'x-api-key': narrow } }), 403, 'forbidden');
    expect(forbidden.message).toContain('activity:read');
  });

  it('validation errors are 400 with issues naming the field', async () => {
    const res = await h.app.inject({ method: 'POST', url: '/v1/api-keys', headers: admin.headers, payload: { name: 'x', scopes: 'org:read' } });
    const error = expectError(res, 400, 'invalid_request');
    expect(error.issues).toEqual([expect.objectContaining({ path: 'body.scopes' })]);

    const query = expectError(await h.app.inject({ method: 'GET', url: '/v1/activity?limit=500', headers: admin.headers }), 400, 'invalid_request');
    expect(query.issues?.[0]?.path).toBe('querystring.limit');
  });

  it('invalid JSON is 400', async () => {
    for (const payload of ['{"name": "x", ', 'not json', '{"a":1}}']) {
      const res = await h.app.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: { ...admin.headers, 'content-type': 'application/json' },
        payload,
      });
      expect(expectError(res, 400, 'invalid_request').message).toContain('JSON');
    }
    const empty = await h.app.inject({ method: 'POST', url: '/v1/api-keys', headers: { ...admin.headers, 'content-type': 'application/json' } });
    expectError(empty, 400, 'invalid_request');
  });

  it('a JSON body over the limit is 413 payload_too_large', async () => {
    const name = 'x'.repeat(BODY_LIMIT);
    const res = await h.app.inject({ method: 'POST', url: '/v1/api-keys', headers: admin.headers, payload: { name, scopes: ['org:read'] } });
    expectError(res, 413, 'payload_too_large');
    const pins = await h.app.inject({
      method: 'PUT',
      url: `/v1/projects/${admin.projectId}/resource-pins`,
      headers: admin.headers,
      payload: { items: Array.from({ length: 100 }, (_, i) => ({ key: `sandbox:${'s'.repeat(20)}${i}` })) },
    });
    expectError(pins, 413, 'payload_too_large');
    // Under the limit the body is parsed and validated as usual (names are at most 100 characters).
    const under = await h.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: admin.headers,
      payload: { name: 'y'.repeat(1500), scopes: ['org:read'] },
    });
    expect(expectError(under, 400, 'invalid_request').issues?.[0]?.path).toBe('body.name');
  });

  it('a body that is not JSON is refused in the envelope', async () => {
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { ...admin.headers, 'content-type': 'application/xml' },
      payload: '<key name="x"/>',
    });
    expectError(res, 415, 'unsupported_media_type');
  });

  it('a URL that cannot be decoded is a 400 in the envelope', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/v1/api-keys/%zz', headers: admin.headers });
    expectError(res, 400, 'invalid_request');
    const long = await h.app.inject({ method: 'GET', url: `/v1/api-keys/${'a'.repeat(150)}`, headers: admin.headers });
    expectError(long, 400, 'invalid_request');
  });

  it('echoes a sane X-Request-Id and replaces anything else', async () => {
    const given = 'client-req.1234:abcd_EF';
    const ok = await h.app.inject({ method: 'GET', url: '/v1/me', headers: { ...admin.headers, 'x-request-id': given } });
    expect(ok.headers['x-request-id']).toBe(given);
    expect(json(ok).meta.requestId).toBe(given);

    const failed = await h.app.inject({ method: 'GET', url: '/v1/me', headers: { 'x-request-id': given } });
    expect(expectError(failed, 401, 'unauthenticated').requestId).toBe(given);

    for (const insane of ['short', 'has spaces in it', 'x'.repeat(129), '<script>alert(1)</script>', 'ünïcode-request-id']) {
      const res = await h.app.inject({ method: 'GET', url: '/v1/me', headers: { ...admin.headers, 'x-request-id': insane } });
      expect(res.statusCode).toBe(200);
      const id = res.headers['x-request-id'];
      expect(id).not.toBe(insane);
      expect(id).toMatch(/^req_[0-9A-Za-z]{20}$/);
      expect(json(res).meta.requestId).toBe(id);
    }
  });

  it('gives each request its own id when none is sent', async () => {
    const a = await h.app.inject({ method: 'GET', url: '/v1/me', headers: admin.headers });
    const b = await h.app.inject({ method: 'GET', url: '/v1/me', headers: admin.headers });
    expect(a.headers['x-request-id']).not.toBe(b.headers['x-request-id']);
  });

  it('serves the OpenAPI document without credentials', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/v1/openapi.json' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-api-version']).toBe('v1');
    expect(String(res.headers['content-type'])).toMatch(/^application\/json/);
    const doc = json(res);
    expect(doc.openapi).toMatch(/^3\./);
    expect(doc.info.version).toBe('v1');
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining([
        '/v1/me',
        '/v1/organizations',
        '/v1/organizations/{id}',
        '/v1/projects',
        '/v1/projects/{id}',
        '/v1/projects/{id}/resource-pins',
        '/v1/api-keys',
        '/v1/api-keys/{id}',
        '/v1/activity',
        '/v1/billing/credits',
        '/v1/billing/credits/history',
      ]),
    );
    expect(Object.keys(doc.paths['/v1/api-keys/{id}'])).toEqual(expect.arrayContaining(['get', 'delete']));
    expect(Object.keys(doc.paths['/v1/projects/{id}/resource-pins'])).toEqual(expect.arrayContaining(['get', 'put']));
    const activityParams = doc.paths['/v1/activity'].get.parameters.map((p: { name: string }) => p.name);
    expect(activityParams).toEqual(expect.arrayContaining(['resource_type', 'resource_id', 'actor_user_id', 'since', 'until', 'limit', 'cursor']));
    expect(doc.components.securitySchemes).toHaveProperty('apiKey');
  });

  it('serves the API docs page without credentials', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/v1/docs' });
    expect(res.statusCode).toBe(200);
    expect(String(res.headers['content-type'])).toMatch(/^text\/html/);
    expect(res.body).toMatch(/<html/i);
    expect(res.headers['x-api-version']).toBe('v1');
  });

  it('a text/plain body on a JSON route is 415, not a validation error', async () => {
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { ...admin.headers, 'content-type': 'text/plain' },
      payload: '{"name":"x","scopes":["org:read"]}',
    });
    expectError(res, 415, 'unsupported_media_type');
  });
});

describe('a WebSocket upgrade refused with an HTTP answer', () => {
  let h: Harness;
  let admin: Actor;
  let port: number;
  beforeAll(async () => {
    h = await createHarness();
    admin = await createOrgAdmin(h);
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    port = (h.app.server.address() as AddressInfo).port;
  });
  afterAll(() => h.close());

  /** Sends a raw upgrade and answers what came back and whether the server closed the connection within 3 s. */
  function upgrade(path: string, headers: Record<string, string>): Promise<{ head: string; closedByServer: boolean }> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1');
      let data = '';
      const timer = setTimeout(() => {
        socket.destroy();
        resolve({ head: data, closedByServer: false });
      }, 3000);
      socket.on('data', (d) => {
        data += d.toString('latin1');
      });
      socket.on('end', () => {
        clearTimeout(timer);
        socket.destroy();
        resolve({ head: data, closedByServer: true });
      });
      socket.on('error', reject);
      const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
      socket.write(
        `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n${extra.join('')}\r\n`,
      );
    });
  }

  it('is closed by the server after the answer, whatever the route (no socket left open by an unauthenticated client)', async () => {
    // Control: the admin's upgrade of a sandbox that is not there is refused too (404), and closed.
    const missing = await upgrade('/v1/sandboxes/sbx_missing/shell', admin.headers as Record<string, string>);
    expect(missing.head).toMatch(/^HTTP\/1\.1 404/);
    expect(missing.closedByServer).toBe(true);
    for (const path of ['/v1/sandboxes/sbx_missing/shell', '/v1/runmesh/connect']) {
      const res = await upgrade(path, {});
      expect(res.head, path).toMatch(/^HTTP\/1\.1 401/);
      expect(res.closedByServer, path).toBe(true);
    }
    // A device route with an API key: 403, closed too.
    const forbidden = await upgrade('/v1/runmesh/connect', admin.headers as Record<string, string>);
    expect(forbidden.head).toMatch(/^HTTP\/1\.1 403/);
    expect(forbidden.closedByServer).toBe(true);
  });
});
