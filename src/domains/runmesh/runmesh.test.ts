import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { linkDevice, wgKeyPair } from '../../../test/runmesh.js';
import { securitySuite } from '../../../test/security.js';

describe('device mesh', () => {
  let h: Harness;
  let admin: Actor;
  let member: Actor;
  let other: Actor;
  const call = (req: InjectOptions) => h.app.inject(req);

  beforeAll(async () => {
    h = await createHarness({ HANGAR_RUNMESH_POLL_INTERVAL_SECONDS: '1' });
    admin = await createOrgAdmin(h);
    member = await addOrgMember(h, admin);
    other = await createOrgAdmin(h);
  });
  afterAll(() => h.close());

  describe('linking', () => {
    it('start answers a short unambiguous code, an approval URL, expiry, a poll secret and the interval; no-store', async () => {
      const res = await call({
        method: 'POST',
        url: '/v1/runmesh/devices/link/start',
        payload: { publicKey: wgKeyPair().publicKey, deviceLabel: 'Ada’s laptop', os: 'macOS 15', appVersion: '2.1.0' },
      });
      expect(res.statusCode).toBe(201);
      expect(res.headers['cache-control']).toBe('no-store');
      const d = json(res).data;
      expect(d.code).toMatch(/^[A-HJ-NP-Z2-9]{4}-[A-HJ-NP-Z2-9]{4}$/);
      // The web console's approval page where the console is built, else the plain /device page.
      expect(d.url).toMatch(new RegExp(`(/link/|/device\\?code=)${d.code}$`));
      expect(Date.parse(d.expiresAt)).toBeGreaterThan(Date.now() + 500_000);
      expect(d.pollSecret).toMatch(/^hgp_/);
      expect(d.interval).toBe(1);
    });

    it('refuses a malformed public key (wrong length, not base64, injected newline) with 400 naming publicKey, and stores nothing', async () => {
      const good = wgKeyPair().publicKey;
      for (const publicKey of [
        'abc',
        `${good.slice(0, -2)}B=`,
        `${good}\nPostUp = rm -rf /`,
        Buffer.alloc(33, 1).toString('base64'),
        `${'A'.repeat(43)}=`,
      ]) {
        const res = await call({ method: 'POST', url: '/v1/runmesh/devices/link/start', payload: { publicKey } });
        expect(res.statusCode, publicKey).toBe(400);
        expect(JSON.stringify(json(res).error)).toContain('publicKey');
      }
      const zero = await call({ method: 'POST', url: '/v1/runmesh/devices/link/start', payload: { publicKey: Buffer.alloc(32).toString('base64') } });
      expect(zero.statusCode).toBe(400);
      const label = await call({ method: 'POST', url: '/v1/runmesh/devices/link/start', payload: { publicKey: good, deviceLabel: 'a\nb' } });
      expect(label.statusCode).toBe(400);
    });

    it('poll: pending, slow_down when faster than the interval (+5 s), 404 for a wrong poll secret; approval gives the credential once', async () => {
      const keys = wgKeyPair();
      const start = json(
        await call({ method: 'POST', url: '/v1/runmesh/devices/link/start', payload: { publicKey: keys.publicKey, deviceLabel: 'box' } }),
      ).data;
      const poll = (body: object) => call({ method: 'POST', url: '/v1/runmesh/devices/link/poll', payload: body });
      const first = await poll({ code: start.code, pollSecret: start.pollSecret });
      expect(first.headers['cache-control']).toBe('no-store');
      expect(json(first).data).toMatchObject({ status: 'pending', interval: 1 });
      const fast = json(await poll({ code: start.code, pollSecret: start.pollSecret })).data;
      expect(fast).toMatchObject({ status: 'slow_down', interval: 6 });
      const wrong = await poll({ code: start.code, pollSecret: 'hgp_nottheone' });
      expect(wrong.statusCode).toBe(404);
      expect(json(wrong).error.code).toBe('not_found');

      // The code typed in lower case without the dash works too.
      const approve = await call({
        method: 'POST',
        url: '/v1/runmesh/devices/link/approve',
        headers: member.headers,
        payload: { code: start.code.replace('-', '').toLowerCase() },
      });
      expect(approve.statusCode, approve.body).toBe(200);
      const node = json(approve).data.node;
      expect(node).toMatchObject({
        ownerUserId: member.userId,
        organizationId: admin.orgId,
        name: 'box',
        status: 'active',
        online: false,
        publicKey: keys.publicKey,
      });
      expect(node.meshAddress).toMatch(/^100\.(6[4-9]|[7-9]\d|1[01]\d|12[0-7])\.\d+\.\d+$/);
      // Wrong secret still learns nothing after approval.
      expect((await poll({ code: start.code, pollSecret: 'hgp_nottheone' })).statusCode).toBe(404);
      const approved = json(await poll({ code: start.code, pollSecret: start.pollSecret })).data;
      expect(approved).toMatchObject({ status: 'approved', nodeId: node.id, meshAddress: node.meshAddress, organizationId: admin.orgId });
      expect(approved.deviceToken).toMatch(/^hgd_[A-Za-z0-9]{48}$/);
      const again = json(await poll({ code: start.code, pollSecret: start.pollSecret })).data;
      expect(again).toEqual({ status: 'completed', nodeId: node.id });
      // The credential is the device's: it reads its own node.
      const self = await call({ method: 'GET', url: '/v1/runmesh/device', headers: { authorization: `Bearer ${approved.deviceToken}` } });
      expect(self.statusCode).toBe(200);
      expect(json(self).data.id).toBe(node.id);
      await expectActivity(h, member, { eventType: 'runmesh.link.approved', resourceType: 'runmesh_device', resourceId: node.id });
    });

    it('approving an unknown code is 404, an approved one 409, an expired one 410 link_expired', async () => {
      const unknown = await call({ method: 'POST', url: '/v1/runmesh/devices/link/approve', headers: admin.headers, payload: { code: 'ZZZZ-ZZZZ' } });
      expect(unknown.statusCode).toBe(404);
      const d = await linkDevice(h, admin);
      const twice = await call({ method: 'POST', url: '/v1/runmesh/devices/link/approve', headers: admin.headers, payload: { code: d.code } });
      expect(twice.statusCode).toBe(409);
      expect(json(twice).error.code).toBe('invalid_state');

      const start = json(await call({ method: 'POST', url: '/v1/runmesh/devices/link/start', payload: { publicKey: wgKeyPair().publicKey } })).data;
      await h.deps.db.kysely
        .updateTable('runmesh_links')
        .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
        .where('code', '=', start.code.replace('-', ''))
        .execute();
      const late = await call({ method: 'POST', url: '/v1/runmesh/devices/link/approve', headers: admin.headers, payload: { code: start.code } });
      expect(late.statusCode).toBe(410);
      expect(json(late).error.code).toBe('link_expired');
      const poll = json(
        await call({ method: 'POST', url: '/v1/runmesh/devices/link/poll', payload: { code: start.code, pollSecret: start.pollSecret } }),
      ).data;
      expect(poll.status).toBe('expired');
      // Nothing was created for it.
      const nodes = json(await call({ method: 'GET', url: '/v1/runmesh/nodes?all=true', headers: admin.headers })).data.nodes;
      expect(nodes.every((n: { publicKey: string }) => n.publicKey !== start.publicKey)).toBe(true);
    });

    it('another organization cannot approve, look up or see a code approved into this one (404)', async () => {
      const d = await linkDevice(h, admin, 'ours');
      const res = await call({ method: 'GET', url: `/v1/runmesh/devices/link/${d.code}`, headers: admin.headers });
      expect(res.statusCode).toBe(200);
      expect(json(res).data).toMatchObject({ status: 'completed', deviceLabel: 'ours' });
      expect((await call({ method: 'GET', url: `/v1/runmesh/devices/link/${d.code}`, headers: other.headers })).statusCode).toBe(404);
      expect(
        (await call({ method: 'POST', url: '/v1/runmesh/devices/link/approve', headers: other.headers, payload: { code: d.code } })).statusCode,
      ).toBe(404);
    });

    it('pending codes a member opened are listed to admins; members may not list links', async () => {
      const start = json(
        await call({ method: 'POST', url: '/v1/runmesh/devices/link/start', payload: { publicKey: wgKeyPair().publicKey, deviceLabel: 'opened' } }),
      ).data;
      expect((await call({ method: 'GET', url: `/v1/runmesh/devices/link/${start.code}`, headers: member.headers })).statusCode).toBe(200);
      const links = json(await call({ method: 'GET', url: '/v1/runmesh/links?status=pending', headers: admin.headers })).data.links;
      expect(links.map((l: { code: string }) => l.code)).toContain(start.code);
      expect((await call({ method: 'GET', url: '/v1/runmesh/links', headers: member.headers })).statusCode).toBe(403);
      const overview = json(await call({ method: 'GET', url: '/v1/runmesh/overview', headers: admin.headers })).data;
      expect(overview.pendingLinks).toBeGreaterThanOrEqual(1);
      // The other organization does not see it.
      const theirs = json(await call({ method: 'GET', url: '/v1/runmesh/links', headers: other.headers })).data.links;
      expect(theirs.map((l: { code: string }) => l.code)).not.toContain(start.code);
    });

    it('the approval page shows the device’s details, escaped, and refuses framing', async () => {
      const start = json(
        await call({
          method: 'POST',
          url: '/v1/runmesh/devices/link/start',
          payload: { publicKey: wgKeyPair().publicKey, deviceLabel: '<script>alert(1)</script>', os: 'Linux "x"', appVersion: '3.0' },
        }),
      ).data;
      const res = await call({ method: 'GET', url: `/device?code=${start.code}` });
      expect(res.statusCode).toBe(200);
      expect(res.headers['content-type']).toContain('text/html');
      expect(res.headers['x-frame-options']).toBe('DENY');
      expect(res.headers['content-security-policy']).toContain("script-src 'self'");
      // The code-entry form (no code yet) submits to this page itself.
      expect(res.headers['content-security-policy']).toContain("form-action 'self'");
      expect(res.body).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
      expect(res.body).not.toContain('<script>alert(1)');
      expect(res.body).toContain('Linux &quot;x&quot;');
      expect(res.body).toContain(start.code);
      const empty = await call({ method: 'GET', url: '/device' });
      expect(empty.body).toContain('<form method="get" action="/device">');
      const unknown = await call({ method: 'GET', url: '/device?code=ZZZZ-ZZZY' });
      expect(unknown.body).toContain('Unknown code');
      expect((await call({ method: 'GET', url: '/device/approve.js' })).body).toContain('/v1/runmesh/devices/link/approve');
    });
  });

  describe('nodes', () => {
    it('lists the caller’s own by default; all=true shows admins every node; members see others only when peers are shared', async () => {
      const mine = await linkDevice(h, member, 'member-box');
      const admins = await linkDevice(h, admin, 'admin-box');
      const list = async (actor: Actor, q = '') =>
        json(await call({ method: 'GET', url: `/v1/runmesh/nodes${q}`, headers: actor.headers })).data.nodes.map((n: { id: string }) => n.id);
      expect(await list(member)).toContain(mine.nodeId);
      expect(await list(member)).not.toContain(admins.nodeId);
      expect(await list(member, '?all=true')).not.toContain(admins.nodeId);
      expect(await list(admin, '?all=true')).toEqual(expect.arrayContaining([mine.nodeId, admins.nodeId]));
      expect(await list(admin, '?owner=me')).not.toContain(mine.nodeId);
      expect((await call({ method: 'GET', url: `/v1/runmesh/nodes/${admins.nodeId}`, headers: member.headers })).statusCode).toBe(404);

      expect(
        (await call({ method: 'PATCH', url: '/v1/runmesh/settings', headers: member.headers, payload: { peerScope: 'organization' } })).statusCode,
      ).toBe(403);
      const set = await call({ method: 'PATCH', url: '/v1/runmesh/settings', headers: admin.headers, payload: { peerScope: 'organization' } });
      expect(json(set).data).toEqual({ peerScope: 'organization' });
      expect(await list(member, '?all=true')).toContain(admins.nodeId);
      expect((await call({ method: 'GET', url: `/v1/runmesh/nodes/${admins.nodeId}`, headers: member.headers })).statusCode).toBe(200);
      // A peer may see, not change, another's node.
      expect(
        (await call({ method: 'PATCH', url: `/v1/runmesh/nodes/${admins.nodeId}`, headers: member.headers, payload: { name: 'mine now' } }))
          .statusCode,
      ).toBe(403);
      await call({ method: 'PATCH', url: '/v1/runmesh/settings', headers: admin.headers, payload: { peerScope: 'owner' } });
      // Another organization sees none of it.
      expect((await call({ method: 'GET', url: `/v1/runmesh/nodes/${mine.nodeId}`, headers: other.headers })).statusCode).toBe(404);
    });

    it('renames (audited), and the name never reaches a peer config', async () => {
      const a = await linkDevice(h, admin, 'a');
      const b = await linkDevice(h, admin, 'b');
      const renamed = await call({ method: 'PATCH', url: `/v1/runmesh/nodes/${a.nodeId}`, headers: admin.headers, payload: { name: 'Build box' } });
      expect(json(renamed).data.name).toBe('Build box');
      expect((await call({ method: 'PATCH', url: `/v1/runmesh/nodes/${a.nodeId}`, headers: admin.headers, payload: { name: '' } })).statusCode).toBe(
        400,
      );
      await h.deps.db.kysely
        .updateTable('runmesh_nodes')
        .set({ endpoints: JSON.stringify(['203.0.113.7:51820']) })
        .where('id', '=', b.nodeId)
        .execute();
      const cfg = json(await call({ method: 'GET', url: `/v1/runmesh/nodes/${a.nodeId}/config`, headers: admin.headers })).data;
      expect(cfg.config).toContain(`Address = ${a.meshAddress}/32`);
      expect(cfg.config).toContain(`PublicKey = ${b.publicKey}`);
      expect(cfg.config).toContain(`AllowedIPs = ${b.meshAddress}/32`);
      expect(cfg.config).toContain('Endpoint = 203.0.113.7:51820');
      expect(cfg.config).not.toContain('PrivateKey');
      expect(cfg.config).not.toContain('Build box');
      const audit = json(await call({ method: 'GET', url: `/v1/runmesh/audit?node_id=${a.nodeId}`, headers: admin.headers })).data.events;
      expect(audit.map((e: { event: string }) => e.event)).toEqual(
        expect.arrayContaining(['config.fetched', 'node.renamed', 'link.approved', 'link.started', 'link.completed']),
      );
    });

    it('the generated config parses with wg-quick strip once the device adds its private key', async () => {
      const a = await linkDevice(h, admin, 'wg-a');
      const b = await linkDevice(h, admin, 'wg-b');
      const cfg = json(await call({ method: 'GET', url: `/v1/runmesh/nodes/${a.nodeId}/config`, headers: admin.headers })).data.config as string;
      const dir = mkdtempSync(path.join(tmpdir(), 'wg-'));
      const file = path.join(dir, 'wg0.conf');
      writeFileSync(file, cfg.replace('[Interface]\n', `[Interface]\nPrivateKey = ${a.privateKey}\n`), { mode: 0o600 });
      const out = execFileSync('wg-quick', ['strip', file], { encoding: 'utf8' });
      expect(out).toContain(`PublicKey = ${b.publicKey}`);
      expect(out).toContain(`PrivateKey = ${a.privateKey}`);
    });

    it('revoke stops the device’s credential at once, drops it from peer configs, is audited with the reason; twice is 409', async () => {
      const a = await linkDevice(h, admin, 'keep');
      const b = await linkDevice(h, admin, 'revoke-me');
      const device = { authorization: `Bearer ${b.token}` };
      expect((await call({ method: 'GET', url: '/v1/runmesh/device', headers: device })).statusCode).toBe(200);
      const res = await call({
        method: 'POST',
        url: `/v1/runmesh/nodes/${b.nodeId}/revoke`,
        headers: admin.headers,
        payload: { reason: 'laptop stolen' },
      });
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).data).toMatchObject({ status: 'revoked', revokedReason: 'laptop stolen' });
      const after = await call({ method: 'GET', url: '/v1/runmesh/device', headers: device });
      expect(after.statusCode).toBe(401);
      const cfg = json(await call({ method: 'GET', url: `/v1/runmesh/nodes/${a.nodeId}/config`, headers: admin.headers })).data.config;
      expect(cfg).not.toContain(b.publicKey);
      expect((await call({ method: 'DELETE', url: `/v1/runmesh/nodes/${b.nodeId}`, headers: admin.headers })).statusCode).toBe(409);
      const audit = json(await call({ method: 'GET', url: '/v1/runmesh/audit?event=node.revoked', headers: admin.headers })).data.events;
      expect(audit[0]).toMatchObject({ nodeId: b.nodeId, reason: 'laptop stolen', actor: 'user', actorUserId: admin.userId });
      const activity = json(await call({ method: 'GET', url: `/v1/runmesh/devices/${b.nodeId}/activity`, headers: admin.headers })).data.events;
      expect(activity.map((e: { eventType: string }) => e.eventType)).toContain('runmesh.node.revoked');
      const overview = json(await call({ method: 'GET', url: '/v1/runmesh/overview', headers: admin.headers })).data;
      expect(overview.revoked).toBeGreaterThanOrEqual(1);
    });

    it('a device credential works only on the device routes; a person’s key is refused on them', async () => {
      const d = await linkDevice(h, member, 'scoped');
      const device = { authorization: `Bearer ${d.token}` };
      for (const url of ['/v1/me', '/v1/runmesh/nodes', '/v1/threads', '/v1/agents']) {
        const res = await call({ method: 'GET', url, headers: device });
        expect(res.statusCode, url).toBe(403);
      }
      expect((await call({ method: 'GET', url: '/v1/runmesh/device', headers: member.headers })).statusCode).toBe(403);
      expect((await call({ method: 'GET', url: '/v1/runmesh/device', headers: { authorization: 'Bearer hgd_forged' } })).statusCode).toBe(401);
      // Unlink from the device: revoked, with its reason.
      const unlink = await call({ method: 'POST', url: '/v1/runmesh/device/unlink', headers: device });
      expect(json(unlink).data.node).toMatchObject({ status: 'revoked', revokedReason: 'unlinked by the device' });
      expect((await call({ method: 'GET', url: '/v1/runmesh/device', headers: device })).statusCode).toBe(401);
    });

    it('an API key cannot be given the device scope', async () => {
      await expect(keyFor(h, admin, ['runmesh:device'])).rejects.toThrow();
    });
  });
});

securitySuite('device mesh', [
  { method: 'GET', url: () => '/v1/runmesh/overview', scope: 'runmesh:read' },
  { method: 'GET', url: () => '/v1/runmesh/nodes', scope: 'runmesh:read' },
  { method: 'GET', url: async (o, h) => `/v1/runmesh/nodes/${(await linkDevice(h, o)).nodeId}`, scope: 'runmesh:read', crossOrg: true },
  { method: 'GET', url: async (o, h) => `/v1/runmesh/nodes/${(await linkDevice(h, o)).nodeId}/config`, scope: 'runmesh:read', crossOrg: true },
  {
    method: 'PATCH',
    url: async (o, h) => `/v1/runmesh/nodes/${(await linkDevice(h, o)).nodeId}`,
    scope: 'runmesh:write',
    body: { name: 'x' },
    crossOrg: true,
  },
  {
    method: 'POST',
    url: async (o, h) => `/v1/runmesh/nodes/${(await linkDevice(h, o)).nodeId}/revoke`,
    scope: 'runmesh:write',
    body: { reason: 'r' },
    crossOrg: true,
  },
  { method: 'DELETE', url: async (o, h) => `/v1/runmesh/nodes/${(await linkDevice(h, o)).nodeId}`, scope: 'runmesh:write', crossOrg: true },
  { method: 'GET', url: () => '/v1/runmesh/audit', scope: 'runmesh:read' },
  { method: 'GET', url: async (o, h) => `/v1/runmesh/devices/${(await linkDevice(h, o)).nodeId}/activity`, scope: 'activity:read', crossOrg: true },
  { method: 'POST', url: () => '/v1/runmesh/devices/link/approve', scope: 'runmesh:write', body: { code: 'ABCD-EFGH' } },
]);

describe('device mesh addresses', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_RUNMESH_CIDR: '10.99.0.0/29' });
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h.close());

  it('hands out every address of a small range once, then says the range is full (409) and creates nothing', async () => {
    const addresses: string[] = [];
    for (let i = 0; i < 6; i++) addresses.push((await linkDevice(h, admin, `n${i}`)).meshAddress);
    expect(new Set(addresses).size).toBe(6);
    expect(addresses.sort()).toEqual(['10.99.0.1', '10.99.0.2', '10.99.0.3', '10.99.0.4', '10.99.0.5', '10.99.0.6']);
    const start = json(
      await h.app.inject({ method: 'POST', url: '/v1/runmesh/devices/link/start', payload: { publicKey: wgKeyPair().publicKey } }),
    ).data;
    const full = await h.app.inject({
      method: 'POST',
      url: '/v1/runmesh/devices/link/approve',
      headers: admin.headers,
      payload: { code: start.code },
    });
    expect(full.statusCode).toBe(409);
    expect(json(full).error.message).toContain('HANGAR_RUNMESH_CIDR');
    // The link is still pending (nothing half-written): a larger range would let it through.
    const poll = json(
      await h.app.inject({ method: 'POST', url: '/v1/runmesh/devices/link/poll', payload: { code: start.code, pollSecret: start.pollSecret } }),
    ).data;
    expect(poll.status).toBe('pending');
  });

  it('a bad HANGAR_RUNMESH_CIDR stops start-up naming the setting', async () => {
    await expect(createHarness({ HANGAR_RUNMESH_CIDR: '100.64.0.1/10' })).rejects.toThrow(/HANGAR_RUNMESH_CIDR/);
  });
});
