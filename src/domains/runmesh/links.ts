/**
 * Device linking (ADR 0029): RFC 8628 device authorization with a proof of possession. Start and poll are public;
 * approval needs a person's credential with `runmesh:write`. Only hashes of the poll secret and of the device's
 * credential are stored; the private key never leaves the device.
 */
import { randomBytes, randomInt } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { exec, orgId, requireOrgAdmin, requireScope, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { sha256Hex, safeEqual } from '../../platform/crypto/index.js';
import { isUniqueViolation } from '../../platform/db/errors.js';
import { CONSOLE_DIST } from '../../platform/http/console.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { base62, nowIso, prefixedId } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import { recordActivity } from '../activity/index.js';
import { linkByCode, pendingLinksFrom, writeAudit, type LinkRow } from './repo.js';
import type { Link, LinkCode, LinkPollBody, LinkPollResult, LinkStartBody } from './schemas.js';
import { parseMeshCidr, parseWireguardKey, randomMeshAddress } from './wireguard.js';

/** No 0/O/1/I: a code read off one screen and typed into another is never ambiguous. 32 symbols: 5 bits each. */
const CODE_ALPHABET = 'ABCDEFGHJKLMNPQRSTUVWXYZ23456789';
const CODE_LENGTH = 8;
/** RFC 8628 §3.5: each slow_down adds five seconds to the interval. */
const SLOW_DOWN_STEP = 5;
/** Pending links one address may hold at once (start is public). */
const MAX_PENDING_PER_SOURCE = 20;
/** Wrong codes one person may enter per window before being told to wait (the code space is 40 bits). */
const MAX_CODE_FAILURES = 20;
const CODE_FAILURE_WINDOW_MS = 10 * 60_000;
const MESH_ADDRESS_ATTEMPTS = 8;

const LINK_STATE = stateKey('runmesh.links', () => ({ failures: new Map<string, { count: number; since: number }>() }));

export const DEVICE_TOKEN_PREFIX = 'hgd_';

function newCode(): string {
  let out = '';
  for (const b of randomBytes(CODE_LENGTH)) out += CODE_ALPHABET[b & 31];
  return out;
}

/** `abcd-efgh`, `ABCDEFGH`, ` abcd efgh ` -> `ABCDEFGH`; null when it cannot be a code. */
export function normalizeCode(input: string): string | null {
  const c = input.toUpperCase().replace(/[\s-]/g, '');
  if (c.length !== CODE_LENGTH) return null;
  for (const ch of c) if (!CODE_ALPHABET.includes(ch)) return null;
  return c;
}

export const displayCode = (code: string): string => `${code.slice(0, 4)}-${code.slice(4)}`;

/**
 * The approval page: the web console's /link/{code} where the console is built (the person approves signed in), else
 * the plain /device page; on HANGAR_BASE_URL when set, else on the origin the device reached (only the device sees it).
 */
export function linkUrl(deps: Deps, code: string, origin: string): string {
  const base = deps.config.publicBaseUrl ?? origin.replace(/\/+$/, '');
  const consoleBuilt = existsSync(path.join(deps.config.consoleDir ?? CONSOLE_DIST, 'index.html'));
  return consoleBuilt ? `${base}/link/${displayCode(code)}` : `${base}/device?code=${displayCode(code)}`;
}

const expired = (row: LinkRow, now = Date.now()) => row.status === 'expired' || (row.status === 'pending' && Date.parse(row.expires_at) <= now);

export function toLink(row: LinkRow): Link {
  return {
    id: row.id,
    code: displayCode(row.code),
    status: expired(row) ? 'expired' : (row.status as Link['status']),
    deviceLabel: row.device_label,
    os: row.os,
    appVersion: row.app_version,
    publicKey: row.public_key,
    nodeId: row.node_id,
    approvedByUserId: row.approved_by_user_id,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    approvedAt: row.approved_at,
    completedAt: row.completed_at,
  };
}

/** POST /v1/runmesh/devices/link/start (public): a pending link for a device's public key. */
export async function startLink(deps: Deps, body: LinkStartBody, source: { ip: string; origin: string }): Promise<LinkCode> {
  const publicKey = parseWireguardKey(body.publicKey);
  if (!publicKey) throw errors.invalidField('publicKey', 'must be a WireGuard public key (base64 of 32 bytes, e.g. from `wg pubkey`)');
  const db = deps.db.kysely;
  const now = new Date();
  if ((await pendingLinksFrom(db, source.ip, now.toISOString())) >= MAX_PENDING_PER_SOURCE) {
    throw errors.rateLimited(
      `too many pending device links from this address; approve or let them expire (${deps.config.runmesh.linkTtlSeconds} s)`,
      60,
    );
  }
  const pollSecret = `hgp_${base62(40)}`;
  const expiresAt = new Date(now.getTime() + deps.config.runmesh.linkTtlSeconds * 1000).toISOString();
  const interval = deps.config.runmesh.pollIntervalSeconds;
  for (let attempt = 0; ; attempt++) {
    const code = newCode();
    try {
      await db
        .insertInto('runmesh_links')
        .values({
          id: prefixedId('lnk'),
          code,
          secret_hash: sha256Hex(pollSecret),
          public_key: publicKey,
          device_label: body.deviceLabel || 'device',
          os: body.os ?? '',
          app_version: body.appVersion ?? '',
          status: 'pending',
          org_id: null,
          opened_org_id: null,
          approved_by_user_id: null,
          node_id: null,
          interval_seconds: interval,
          last_polled_at: null,
          source_ip: source.ip,
          created_at: now.toISOString(),
          expires_at: expiresAt,
          approved_at: null,
          completed_at: null,
        })
        .execute();
      return { code: displayCode(code), url: linkUrl(deps, code, source.origin), expiresAt, pollSecret, interval };
    } catch (err) {
      // A code still held by another link (live or kept): draw again.
      if (!isUniqueViolation(err) || attempt >= 5) throw err;
    }
  }
}

/**
 * POST /v1/runmesh/devices/link/poll (public): the link's state for the device that started it (a wrong poll
 * secret is a 404: the code alone, seen on a screen, reveals nothing). The first poll after approval collects the
 * device's credential, once.
 */
export async function pollLink(deps: Deps, body: LinkPollBody): Promise<LinkPollResult> {
  const code = normalizeCode(body.code);
  const db = deps.db.kysely;
  const row = code ? await linkByCode(db, code) : undefined;
  if (!row || !safeEqual(sha256Hex(body.pollSecret), row.secret_hash)) throw errors.notFound('device link code');
  const now = new Date();
  if (row.status === 'completed') return { status: 'completed', nodeId: row.node_id ?? undefined };
  if (expired(row, now.getTime())) return { status: 'expired' };
  if (row.status === 'pending') {
    const last = row.last_polled_at ? Date.parse(row.last_polled_at) : 0;
    const tooSoon = now.getTime() - last < row.interval_seconds * 1000 - 250; // a little slack for timers
    const interval = tooSoon ? row.interval_seconds + SLOW_DOWN_STEP : row.interval_seconds;
    await db
      .updateTable('runmesh_links')
      .set({ last_polled_at: now.toISOString(), interval_seconds: interval })
      .where('id', '=', row.id)
      .where('status', '=', 'pending')
      .execute();
    return { status: tooSoon ? 'slow_down' : 'pending', interval, expiresAt: row.expires_at };
  }
  // Approved: hand out the credential once. The conditional update decides which of two racing polls gets it.
  const token = `${DEVICE_TOKEN_PREFIX}${base62(48)}`;
  const ctx = systemCtx(deps, { userId: row.approved_by_user_id!, orgId: row.org_id!, role: null, scopes: new Set(), apiKeyId: null });
  const node = await withTx(ctx, async (tx) => {
    const took = await exec(tx)
      .updateTable('runmesh_links')
      .set({ status: 'completed', completed_at: now.toISOString(), last_polled_at: now.toISOString() })
      .where('id', '=', row.id)
      .where('status', '=', 'approved')
      .executeTakeFirst();
    if (Number(took.numUpdatedRows) !== 1) return null;
    const n = await exec(tx)
      .updateTable('runmesh_nodes')
      .set({ credential_hash: sha256Hex(token), updated_at: now.toISOString() })
      .where('id', '=', row.node_id!)
      .where('org_id', '=', row.org_id!)
      .where('status', '=', 'active')
      .returning(['id', 'mesh_ip', 'org_id'])
      .executeTakeFirst();
    if (!n) throw errors.invalidState('the node of this link was revoked before the device collected its credential', 'revoked');
    await writeAudit(exec(tx), row.org_id!, { nodeId: n.id, linkId: row.id, actor: 'device', event: 'link.completed' });
    await recordActivity(tx, {
      resourceType: 'runmesh_device',
      resourceId: n.id,
      runmeshNodeId: n.id,
      eventType: 'runmesh.link.completed',
      status: 'completed',
      title: `Device ${row.device_label} collected its credential`,
    });
    return n;
  });
  if (!node) return { status: 'completed', nodeId: row.node_id ?? undefined };
  return { status: 'approved', nodeId: node.id, deviceToken: token, meshAddress: node.mesh_ip, organizationId: node.org_id };
}

function codeFailure(ctx: Ctx): void {
  const { failures } = ctx.deps.state.get(LINK_STATE);
  const key = ctx.principal.userId;
  const now = Date.now();
  const f = failures.get(key);
  if (!f || now - f.since > CODE_FAILURE_WINDOW_MS) failures.set(key, { count: 1, since: now });
  else f.count++;
}

function checkCodeFailures(ctx: Ctx): void {
  const f = ctx.deps.state.get(LINK_STATE).failures.get(ctx.principal.userId);
  if (f && Date.now() - f.since <= CODE_FAILURE_WINDOW_MS && f.count >= MAX_CODE_FAILURES) {
    throw errors.rateLimited(
      'too many unknown device link codes; wait a few minutes',
      Math.ceil((f.since + CODE_FAILURE_WINDOW_MS - Date.now()) / 1000),
    );
  }
}

/** A link by the code a person typed: unknown codes count against them (rate limit on code entry). */
async function linkForCode(ctx: Ctx, input: string): Promise<LinkRow> {
  checkCodeFailures(ctx);
  const code = normalizeCode(input);
  const row = code ? await linkByCode(exec(ctx), code) : undefined;
  // Another organization's link, once approved, is not this caller's business.
  if (!row || (row.org_id && row.org_id !== orgId(ctx))) {
    codeFailure(ctx);
    throw errors.notFound('device link code', input.trim());
  }
  return row;
}

/**
 * GET /v1/runmesh/devices/link/{code}: what an approver checks before approving (the device's label, OS and app
 * version). Opening a pending code shows it to the organization's admins in GET /v1/runmesh/links.
 */
export async function lookupLink(ctx: Ctx, input: string): Promise<Link> {
  requireScope(ctx, 'runmesh:read');
  const row = await linkForCode(ctx, input);
  if (row.status === 'pending' && !row.opened_org_id && !expired(row)) {
    await exec(ctx)
      .updateTable('runmesh_links')
      .set({ opened_org_id: orgId(ctx) })
      .where('id', '=', row.id)
      .where('opened_org_id', 'is', null)
      .execute();
  }
  return toLink(row);
}

/** POST /v1/runmesh/devices/link/approve: a pending code becomes a node of the caller's organization, owned by the caller. */
export async function approveLink(ctx: Ctx, input: string): Promise<{ link: Link; nodeId: string }> {
  requireScope(ctx, 'runmesh:write');
  const row = await linkForCode(ctx, input);
  if (expired(row)) throw new AppError('link_expired', `device link code ${displayCode(row.code)} has expired; start linking again on the device`);
  if (row.status !== 'pending') throw errors.invalidState(`device link code ${displayCode(row.code)} was already approved`, row.status);
  const org = orgId(ctx);
  const range = ctx.deps.config.runmesh.cidr;
  for (let attempt = 1; ; attempt++) {
    const nodeId = prefixedId('node');
    const now = nowIso();
    try {
      return await withTx(ctx, async (tx) => {
        const db = exec(tx);
        const took = await db
          .updateTable('runmesh_links')
          .set({ status: 'approved', org_id: org, approved_by_user_id: ctx.principal.userId, node_id: nodeId, approved_at: now })
          .where('id', '=', row.id)
          .where('status', '=', 'pending')
          .executeTakeFirst();
        if (Number(took.numUpdatedRows) !== 1)
          throw errors.invalidState(`device link code ${displayCode(row.code)} was already approved`, 'approved');
        await db
          .insertInto('runmesh_nodes')
          .values({
            id: nodeId,
            org_id: org,
            owner_user_id: ctx.principal.userId,
            name: row.device_label,
            os: row.os,
            app_version: row.app_version,
            public_key: row.public_key,
            mesh_ip: attempt <= 2 ? randomMeshAddress(range) : await freeMeshAddress(db, range),
            // Unusable until the device collects its credential (a sha256 is 64 hex digits; this is not one).
            credential_hash: `uncollected:${row.id}`,
            status: 'active',
            endpoints: '[]',
            connected: 0,
            connected_via: null,
            last_seen_at: null,
            link_id: row.id,
            revoked_at: null,
            revoked_by_user_id: null,
            revoked_reason: null,
            created_at: now,
            updated_at: now,
          })
          .execute();
        const details = { deviceLabel: row.device_label, os: row.os, appVersion: row.app_version, code: displayCode(row.code) };
        await writeAudit(db, org, { nodeId, linkId: row.id, actor: 'system', event: 'link.started', metadata: details, at: row.created_at });
        await writeAudit(db, org, {
          nodeId,
          linkId: row.id,
          actor: 'user',
          actorUserId: ctx.principal.userId,
          event: 'link.approved',
          metadata: details,
        });
        await recordActivity(tx, {
          resourceType: 'runmesh_device',
          resourceId: nodeId,
          runmeshNodeId: nodeId,
          eventType: 'runmesh.link.approved',
          status: 'completed',
          title: `Device ${row.device_label} linked`,
          metadata: details,
        });
        const link = toLink({
          ...row,
          status: 'approved',
          org_id: org,
          approved_by_user_id: ctx.principal.userId,
          node_id: nodeId,
          approved_at: now,
        });
        return { link, nodeId };
      });
    } catch (err) {
      // Two replicas drew the same mesh address: the unique index refused one; draw again.
      if (!isUniqueViolation(err) || attempt >= MESH_ADDRESS_ATTEMPTS) throw err;
    }
  }
}

/**
 * A free address of the mesh range, found by looking (after random draws collided: a small or crowded range). The
 * range is the installation's, so every node's address counts; revoked nodes keep theirs (their audit names it).
 */
async function freeMeshAddress(db: ReturnType<typeof exec>, range: string): Promise<string> {
  const { size } = parseMeshCidr(range);
  const hosts = size - 2;
  if (hosts > 65_536) return randomMeshAddress(range);
  const used = new Set((await db.selectFrom('runmesh_nodes').select('mesh_ip').execute()).map((r) => r.mesh_ip));
  const free: number[] = [];
  for (let i = 0; i < hosts; i++) if (!used.has(randomMeshAddress(range, () => i))) free.push(i);
  if (!free.length) throw errors.conflict(`the mesh range HANGAR_RUNMESH_CIDR (${range}) has no free address left; configure a larger one`);
  const pick = free[randomInt(free.length)]!;
  return randomMeshAddress(range, () => pick);
}

/** GET /v1/runmesh/links (admins): the organization's links, and pending codes its members opened. */
export async function listLinks(ctx: Ctx, status?: Link['status']): Promise<Link[]> {
  requireScope(ctx, 'runmesh:read');
  requireOrgAdmin(ctx);
  const org = orgId(ctx);
  const rows = await exec(ctx)
    .selectFrom('runmesh_links')
    .selectAll()
    .where((eb) => eb.or([eb('org_id', '=', org), eb.and([eb('org_id', 'is', null), eb('opened_org_id', '=', org)])]))
    .orderBy('created_at', 'desc')
    .limit(500)
    .execute();
  const links = rows.map(toLink);
  return status ? links.filter((l) => l.status === status) : links;
}

/** Links the organization is waiting on: pending codes it opened, and approved links not yet collected. */
export async function pendingLinkCount(ctx: Ctx): Promise<number> {
  const org = orgId(ctx);
  const now = nowIso();
  const rows = await exec(ctx)
    .selectFrom('runmesh_links')
    .select(['status', 'expires_at', 'org_id', 'opened_org_id'])
    .where((eb) =>
      eb.or([
        eb.and([eb('org_id', '=', org), eb('status', '=', 'approved')]),
        eb.and([eb('org_id', 'is', null), eb('opened_org_id', '=', org), eb('status', '=', 'pending'), eb('expires_at', '>', now)]),
      ]),
    )
    .execute();
  return rows.length;
}

/**
 * The sweeper: pending links past their expiry become `expired` (audited where an organization opened them);
 * approved links whose device never came for its credential by then expire too, and their node is revoked.
 */
export async function expireLinks(deps: Deps): Promise<number> {
  const now = nowIso();
  const db = deps.db.kysely;
  const due = await db
    .selectFrom('runmesh_links')
    .selectAll()
    .where('status', 'in', ['pending', 'approved'])
    .where('expires_at', '<=', now)
    .limit(500)
    .execute();
  let n = 0;
  for (const row of due) {
    const org = row.org_id ?? row.opened_org_id;
    const ctx = systemCtx(deps, { userId: 'system', orgId: org, role: null, scopes: new Set(), apiKeyId: null });
    const done = await withTx(ctx, async (tx) => {
      const took = await exec(tx)
        .updateTable('runmesh_links')
        .set({ status: 'expired' })
        .where('id', '=', row.id)
        .where('status', '=', row.status)
        .executeTakeFirst();
      if (Number(took.numUpdatedRows) !== 1 || !org) return Number(took.numUpdatedRows) === 1;
      const reason = row.status === 'approved' ? 'the device never collected its credential' : null;
      if (row.status === 'approved' && row.node_id) {
        await exec(tx)
          .updateTable('runmesh_nodes')
          .set({ status: 'revoked', revoked_at: now, revoked_reason: reason, updated_at: now })
          .where('id', '=', row.node_id)
          .where('org_id', '=', org)
          .execute();
      }
      await writeAudit(exec(tx), org, {
        nodeId: row.node_id,
        linkId: row.id,
        actor: 'system',
        event: 'link.expired',
        reason,
        metadata: { code: displayCode(row.code) },
      });
      if (row.node_id) {
        await recordActivity(
          tx,
          {
            resourceType: 'runmesh_device',
            resourceId: row.node_id,
            runmeshNodeId: row.node_id,
            eventType: 'runmesh.link.expired',
            status: 'failed',
            title: `Device link ${displayCode(row.code)} expired`,
            summary: reason ?? undefined,
          },
          org,
        );
      }
      return true;
    });
    if (done) n++;
  }
  return n;
}

/**
 * The approval page's view of a code (public: the code is what the person has in hand). Unknown codes count
 * against the address asking, as wrong codes count against a person.
 */
export async function publicLinkDetails(deps: Deps, input: string, sourceIp: string): Promise<Link | null> {
  const { failures } = deps.state.get(LINK_STATE);
  const key = `ip:${sourceIp}`;
  const f = failures.get(key);
  const now = Date.now();
  if (f && now - f.since <= CODE_FAILURE_WINDOW_MS && f.count >= MAX_CODE_FAILURES) return null;
  const code = normalizeCode(input);
  const row = code ? await linkByCode(deps.db.kysely, code) : undefined;
  if (!row) {
    if (!f || now - f.since > CODE_FAILURE_WINDOW_MS) failures.set(key, { count: 1, since: now });
    else f.count++;
    return null;
  }
  return toLink(row);
}
