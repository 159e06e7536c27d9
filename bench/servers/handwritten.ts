/**
 * Baseline: the activity page written by hand, as a careful engineer would without Hangar's layers. Fastify with one
 * route (as the bare server) on Hangar's own SQLite file, opened beside the running Hangar (WAL lets both read).
 * Per request: the API key checked the plain way (SHA-256, one prepared statement joining the key to its owner's
 * membership, revoked and expiry checked, the scope checked), then the prepared statement Hangar's activity list ran
 * before it had the database write JSON (`select *`, the same WHERE, ORDER BY and LIMIT as Kysely compiles), the rows
 * mapped to the API's events, and JSON.stringify of the page. No cache, no framework hooks, no query builder.
 */
import { createHash, randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import Fastify from 'fastify';
import { serveChild } from '../lib/child.js';

interface HandwrittenOptions {
  path: string;
  /** Hangar's database file (its data dir's hangar.db). */
  dbFile: string;
}

interface KeyRow {
  id: string;
  org_id: string;
  user_id: string;
  scopes: string;
  revoked_at: string | null;
  expires_at: string | null;
  role: string;
}

type EventRow = Record<string, string | null>;

const KEY_PATTERN = /^hgr_(live|test)_[0-9A-Za-z]{40}$/;
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const OPTIONAL = [
  ['thread_id', 'threadId'],
  ['agent_run_id', 'agentRunId'],
  ['sandbox_id', 'sandboxId'],
  ['workspace_id', 'workspaceId'],
  ['tool_slug', 'toolSlug'],
  ['installable_agent_install_id', 'installableAgentInstallId'],
  ['code_execution_id', 'codeExecutionId'],
  ['runmesh_node_id', 'runmeshNodeId'],
] as const;

/** A request id like Hangar's (`req_` + 20 base62 characters), so the bodies are the same length. */
function requestId(): string {
  const bytes = randomBytes(20);
  let id = 'req_';
  for (const b of bytes) id += BASE62[b % 62];
  return id;
}

function toEvent(row: EventRow) {
  const e: Record<string, unknown> = {
    id: row.id,
    resourceType: row.resource_type,
    resourceId: row.resource_id,
    eventType: row.event_type,
    severity: row.severity,
    status: row.status,
    title: row.title,
    summary: row.summary,
    actorUserId: row.actor_user_id,
    occurredAt: row.occurred_at,
  };
  for (const [column, key] of OPTIONAL) if (row[column]) e[key] = row[column];
  if (row.metadata) e.metadata = JSON.parse(row.metadata);
  return e;
}

const app = Fastify({ logger: false });
let db: Database.Database | undefined;

serveChild(
  async (options: HandwrittenOptions) => {
    db = new Database(options.dbFile, { fileMustExist: true });
    db.pragma('busy_timeout = 5000');
    const keyByHash = db.prepare<[string], KeyRow>(
      `select k.id, k.org_id, k.user_id, k.scopes, k.revoked_at, k.expires_at, m.role
       from api_keys k join memberships m on m.org_id = k.org_id and m.user_id = k.user_id where k.hash = ?`,
    );
    const page = db.prepare<[string, number], EventRow>(
      `select * from "activity_events" where "org_id" = ? order by "occurred_at" desc, "id" desc limit ?`,
    );
    const ownPage = db.prepare<[string, string, number], EventRow>(
      `select * from "activity_events" where "org_id" = ? and "actor_user_id" = ? order by "occurred_at" desc, "id" desc limit ?`,
    );

    app.get(options.path, (req, reply) => {
      const id = requestId();
      reply.header('x-request-id', id);
      const secret = req.headers['x-api-key'];
      const key =
        typeof secret === 'string' && KEY_PATTERN.test(secret) ? keyByHash.get(createHash('sha256').update(secret).digest('hex')) : undefined;
      if (!key || key.revoked_at || (key.expires_at && Date.parse(key.expires_at) <= Date.now())) {
        return reply.status(401).send({ error: { code: 'unauthenticated', message: 'API key is invalid, expired or revoked', requestId: id } });
      }
      const scopes: string[] = JSON.parse(key.scopes);
      if (!scopes.some((s) => s === '*' || s === 'activity:*' || s === 'activity:read')) {
        return reply.status(403).send({ error: { code: 'forbidden', message: 'this credential lacks the "activity:read" scope', requestId: id } });
      }
      const raw = (req.query as { limit?: string }).limit;
      const limit = raw === undefined ? 50 : Number(raw);
      if (!Number.isInteger(limit) || limit < 1 || limit > 200) {
        return reply.status(400).send({ error: { code: 'invalid_request', message: 'limit: must be between 1 and 200', requestId: id } });
      }
      // Admins see the organization's events; a member their own.
      const rows = key.role === 'admin' ? page.all(key.org_id, limit + 1) : ownPage.all(key.org_id, key.user_id, limit + 1);
      const hasMore = rows.length > limit;
      const shown = hasMore ? rows.slice(0, limit) : rows;
      const last = shown[shown.length - 1];
      const nextCursor = hasMore && last ? Buffer.from(JSON.stringify([last.occurred_at, last.id])).toString('base64url') : null;
      reply.header('content-type', 'application/json; charset=utf-8');
      return reply.send(JSON.stringify({ data: { events: shown.map(toEvent) }, meta: { requestId: id, hasMore, nextCursor } }));
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const address = app.server.address();
    return { port: typeof address === 'object' && address ? address.port : 0 };
  },
  async () => {
    await app.close();
    db?.close();
  },
);
