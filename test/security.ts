import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_SCOPES, type Scope } from '../src/platform/scopes.js';
import { createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from './harness.js';

export interface RouteCase {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** The URL, naming resources of `owner` where it names any. */
  url: (owner: Actor, h: Harness) => string | Promise<string>;
  /** Scope the route requires; null when any valid credential will do. */
  scope: Scope | null;
  body?: unknown;
  contentType?: string;
  /** The URL names an organization-owned resource: another organization must get 404. */
  crossOrg?: boolean;
}

/**
 * The shared security checks every route runs: no credential -> 401, malformed or revoked key -> 401,
 * missing scope -> 403, another organization's resource -> 404 (with the owner's same request as the control).
 * Each answer uses the error envelope.
 */
export function securitySuite(name: string, cases: RouteCase[]) {
  describe(`security: ${name}`, () => {
    let h: Harness;
    let owner: Actor;
    let stranger: Actor;
    let revokedKey: string;

    beforeAll(async () => {
      h = await createHarness();
      owner = await createOrgAdmin(h);
      stranger = await createOrgAdmin(h);
      revokedKey = await keyFor(h, owner, ['*']);
      const res = await h.app.inject({ method: 'GET', url: '/v1/api-keys', headers: owner.headers });
      const id = json(res).data.find((k: { prefix: string }) => revokedKey.startsWith(k.prefix)).id;
      await h.app.inject({ method: 'DELETE', url: `/v1/api-keys/${id}`, headers: owner.headers });
    });
    afterAll(() => h?.close());

    async function call(c: RouteCase, actor: Actor, headers: Record<string, string>) {
      const body = c.body === undefined ? undefined : typeof c.body === 'string' ? c.body : JSON.stringify(c.body);
      const res = await h.app.inject({
        method: c.method,
        url: await c.url(actor, h),
        headers: { ...(body !== undefined ? { 'content-type': c.contentType ?? 'application/json' } : {}), ...headers },
        payload: body,
      });
      expect(res.headers['x-api-version']).toBe('v1');
      return { status: res.statusCode, body: res.body ? json(res) : undefined };
    }

    for (const c of cases) {
      const label = `${c.method} ${c.url
        .toString()
        .replace(/^.*?=>\s*/, '')
        .slice(0, 80)}`;

      it(`${label}: no credential is 401`, async () => {
        const res = await call(c, owner, {});
        expect(res.status).toBe(401);
        expect(res.body.error.code).toBe('unauthenticated');
        expect(res.body.error.requestId).toBeTruthy();
      });

      it(`${label}: malformed and revoked keys are 401`, async () => {
        expect((await call(c, owner, { 'x-api-key': 'hgr_live_notarealkey' })).status).toBe(401);
        expect((await call(c, owner, { authorization: 'Bearer not.a.jwt' })).status).toBe(401);
        const revoked = await call(c, owner, { 'x-api-key': revokedKey });
        expect(revoked.status).toBe(401);
        expect(revoked.body.error.code).toBe('unauthenticated');
      });

      if (c.scope) {
        const scope = c.scope;
        it(`${label}: a key without ${scope} is 403`, async () => {
          const key = await keyFor(
            h,
            owner,
            ALL_SCOPES.filter((s) => s !== scope),
          );
          const res = await call(c, owner, { 'x-api-key': key });
          expect(res.status).toBe(403);
          expect(res.body.error.code).toBe('forbidden');
          expect(res.body.error.message).toContain(scope);
        });
      }

      if (c.crossOrg) {
        it(`${label}: another organization's resource is 404, and the owner's same request is not`, async () => {
          const url = await c.url(owner, h);
          const body = c.body === undefined ? undefined : typeof c.body === 'string' ? c.body : JSON.stringify(c.body);
          const res = await h.app.inject({
            method: c.method,
            url,
            headers: { ...stranger.headers, ...(body !== undefined ? { 'content-type': c.contentType ?? 'application/json' } : {}) },
            payload: body,
          });
          expect(res.statusCode).toBe(404);
          expect(json(res).error.code).toBe('not_found');
          // The control: the same request by the resource's owner finds it (after the stranger's attempt, which
          // therefore changed nothing), so the 404 above is the organization boundary, not a missing resource.
          const control = await h.app.inject({
            method: c.method,
            url,
            headers: { ...owner.headers, ...(body !== undefined ? { 'content-type': c.contentType ?? 'application/json' } : {}) },
            payload: body,
          });
          expect(control.statusCode, `the owner's control request: ${control.body.slice(0, 300)}`).not.toBe(404);
        });
      }
    }
  });
}
