import websocket from '@fastify/websocket';
import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { clientGone } from '../../platform/http/client-gone.js';
import { envelope, ErrorBody, errorResponses, ok, page, pageEnvelope } from '../../platform/http/envelope.js';
import { errors } from '../../platform/http/errors.js';
import { sendNdjson } from '../../platform/http/ndjson.js';
import type { App } from '../../platform/http/server.js';
import { ActivityPage, ActivityQuery, listActivity, type ActivityRegistry } from '../activity/index.js';
import { DeviceModelBody, deviceModel, serveDevice } from './dispatch.js';
import { approveLink, listLinks, lookupLink, pollLink, startLink } from './links.js';
import {
  canSeeNode,
  deviceSelf,
  getNode,
  getSettings,
  listAudit,
  listNodes,
  nodeConfig,
  overview,
  renameNode,
  revokeNode,
  unlinkSelf,
  updateSettings,
} from './nodes.js';
import { APPROVE_SCRIPT, approvalPage } from './page.js';
import {
  AuditEvent,
  AuditQuery,
  Link,
  LinkApproveBody,
  LinkCode,
  LinkCodeParams,
  LinkPollBody,
  LinkPollResult,
  LinkStartBody,
  LinksQuery,
  Node,
  NodeParams,
  NodesQuery,
  Overview,
  PeerConfig,
  RenameBody,
  RevokeBody,
  Settings,
} from './schemas.js';

const tags = ['device mesh'];
const noStore = { 'cache-control': 'no-store' };

/** Activity filters on `runmesh_device` resources check the node's visibility here. */
export function registerRunmeshActivity(registry: ActivityRegistry): void {
  registry.resource('runmesh_device', canSeeNode);
}

export async function runmeshRoutes(app: App, deps: Deps) {
  // The threads routes register the WebSocket plugin when this process serves them; a mesh-only process does it here.
  if (!app.hasDecorator('websocketServer')) await app.register(websocket, { options: { maxPayload: 64 * 1024 } });

  app.post(
    '/v1/runmesh/devices/link/start',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Start linking a device (public)',
        description: [
          '`publicKey` (the device’s WireGuard Curve25519 public key; its private key never leaves it), `deviceLabel`, `os`, `appVersion`. ',
          '201 with `code` (`XXXX-XXXX`, no 0/O/1/I), `url` (the approval page, showing the device’s label, OS and app version), `expiresAt`, ',
          'and for the device only `pollSecret` and `interval` (seconds between polls). At most 20 pending links per source address (429).',
        ].join(''),
        body: LinkStartBody,
        response: { 201: envelope(LinkCode), ...errorResponses },
      },
    },
    async (req, reply) =>
      reply
        .status(201)
        .headers(noStore)
        .send(ok(req, await startLink(deps, req.body, { ip: req.ip, origin: `${req.protocol}://${req.host}` }))),
  );

  app.post(
    '/v1/runmesh/devices/link/poll',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Poll a device link (public)',
        description: [
          '`{ code, pollSecret }` (the secret from start: a wrong one is 404). `status`: `pending` (with `interval`), `slow_down` (polled sooner than `interval`; ',
          'the interval grows by 5 s), `approved` (once: `nodeId`, `deviceToken` — the device’s `hgd_` credential, shown only here — `meshAddress`, `organizationId`), ',
          '`completed` (collected before), `expired`. `Cache-Control: no-store`.',
        ].join(''),
        body: LinkPollBody,
        response: { 200: envelope(LinkPollResult), ...errorResponses },
      },
    },
    async (req, reply) => reply.headers(noStore).send(ok(req, await pollLink(deps, req.body))),
  );

  app.get(
    '/v1/runmesh/devices/link/:code',
    {
      config: { scope: 'runmesh:read' },
      schema: {
        tags,
        summary: 'Look up a device link code',
        description:
          'What to check before approving: the device’s label, OS, app version and public key. Unknown codes are 404 and count against you (20 per 10 minutes, then 429).',
        params: LinkCodeParams,
        response: { 200: envelope(Link), ...errorResponses },
      },
    },
    async (req) => ok(req, await lookupLink(req.ctx, req.params.code)),
  );

  app.post(
    '/v1/runmesh/devices/link/approve',
    {
      config: { scope: 'runmesh:write' },
      schema: {
        tags,
        summary: 'Approve a device link code',
        description: [
          '`{ code }`: the pending code becomes a node of your organization, owned by you, with a mesh address; the device collects its credential on its next poll. ',
          'Unknown code 404; expired 410 `link_expired`; already approved 409 `invalid_state`.',
        ].join(''),
        body: LinkApproveBody,
        response: { 200: envelope(z.object({ link: Link, node: Node })), ...errorResponses, 410: ErrorBody },
      },
    },
    async (req) => {
      const { link, nodeId } = await approveLink(req.ctx, req.body.code);
      return ok(req, { link, node: await getNode(req.ctx, nodeId) });
    },
  );

  app.get(
    '/v1/runmesh/links',
    {
      config: { scope: 'runmesh:read' },
      schema: {
        tags,
        summary: 'Device links of the organization (admins)',
        description: 'Links approved into the organization, and pending codes its members opened; newest first. `status` filters.',
        querystring: LinksQuery,
        response: { 200: envelope(z.object({ links: z.array(Link) })), ...errorResponses },
      },
    },
    async (req) => ok(req, { links: await listLinks(req.ctx, req.query.status) }),
  );

  app.get(
    '/v1/runmesh/overview',
    {
      config: { scope: 'runmesh:read' },
      schema: { tags, summary: 'Node counts', response: { 200: envelope(Overview), ...errorResponses } },
    },
    async (req) => ok(req, await overview(req.ctx)),
  );

  app.get(
    '/v1/runmesh/nodes',
    {
      config: { scope: 'runmesh:read' },
      schema: {
        tags,
        summary: 'List nodes',
        description:
          'Your own nodes; `all=true` every node you can see (admins: the organization’s; members: also their peers when the organization shares peers).',
        querystring: NodesQuery,
        response: { 200: envelope(z.object({ nodes: z.array(Node) })), ...errorResponses },
      },
    },
    async (req) => ok(req, { nodes: await listNodes(req.ctx, req.query) }),
  );

  app.get(
    '/v1/runmesh/nodes/:id',
    {
      config: { scope: 'runmesh:read' },
      schema: { tags, summary: 'Get a node', params: NodeParams, response: { 200: envelope(Node), ...errorResponses } },
    },
    async (req) => ok(req, await getNode(req.ctx, req.params.id)),
  );

  app.get(
    '/v1/runmesh/nodes/:id/config',
    {
      config: { scope: 'runmesh:read' },
      schema: {
        tags,
        summary: 'A node’s WireGuard peer config',
        description: [
          'A wg-quick file: `[Interface] Address` (no PrivateKey: the device adds its own), then a `[Peer]` per visible active node (`PublicKey`, `AllowedIPs`, `Endpoint` when it reported one, ',
          '`PersistentKeepalive`). Peers: the same owner’s nodes, or the organization’s when `peerScope` is `organization`. Only validated keys, addresses and endpoints are written; names never. ',
          'The node’s owner or an admin; `config` is the file.',
        ].join(''),
        params: NodeParams,
        response: { 200: envelope(PeerConfig), ...errorResponses },
      },
    },
    async (req, reply) => {
      const cfg = await nodeConfig(req.ctx, req.params.id);
      return reply.headers(noStore).send(ok(req, cfg));
    },
  );

  app.patch(
    '/v1/runmesh/nodes/:id',
    {
      config: { scope: 'runmesh:write' },
      schema: { tags, summary: 'Rename a node', params: NodeParams, body: RenameBody, response: { 200: envelope(Node), ...errorResponses } },
    },
    async (req) => ok(req, await renameNode(req.ctx, req.params.id, req.body.name)),
  );

  const revokeDescription =
    'Revokes at once: the device’s credential stops working, its connection is closed (4401), it leaves every peer config, its queued and running runs fail. Audited with the reason. 409 when already revoked.';
  app.delete(
    '/v1/runmesh/nodes/:id',
    {
      config: { scope: 'runmesh:write' },
      schema: {
        tags,
        summary: 'Delete (revoke) a node',
        description: revokeDescription,
        params: NodeParams,
        response: { 200: envelope(Node), ...errorResponses },
      },
    },
    async (req) => ok(req, await revokeNode(req.ctx, req.params.id, 'deleted')),
  );

  app.post(
    '/v1/runmesh/nodes/:id/revoke',
    {
      config: { scope: 'runmesh:write' },
      schema: {
        tags,
        summary: 'Revoke a node',
        description: `\`{ reason }\` (optional). ${revokeDescription}`,
        params: NodeParams,
        body: RevokeBody.nullish(),
        response: { 200: envelope(Node), ...errorResponses },
      },
    },
    async (req) => ok(req, await revokeNode(req.ctx, req.params.id, req.body?.reason ?? 'revoked')),
  );

  app.get(
    '/v1/runmesh/settings',
    {
      config: { scope: 'runmesh:read' },
      schema: { tags, summary: 'Device mesh settings', response: { 200: envelope(Settings), ...errorResponses } },
    },
    async (req) => ok(req, await getSettings(req.ctx)),
  );

  app.patch(
    '/v1/runmesh/settings',
    {
      config: { scope: 'runmesh:write' },
      schema: {
        tags,
        summary: 'Change device mesh settings (admins)',
        description:
          '`peerScope`: `owner` (a node’s peers are its owner’s other nodes; the default) or `organization` (every active node of the organization).',
        body: Settings,
        response: { 200: envelope(Settings), ...errorResponses },
      },
    },
    async (req) => ok(req, await updateSettings(req.ctx, req.body)),
  );

  app.get(
    '/v1/runmesh/audit',
    {
      config: { scope: 'runmesh:read' },
      schema: {
        tags,
        summary: 'Device mesh audit log',
        description: [
          'Newest first: `link.started`, `link.approved`, `link.completed`, `link.expired`, `node.renamed`, `node.revoked` (with `reason`), `config.fetched`, ',
          '`device.connected`, `device.disconnected`, `settings.updated`. Admins see the organization’s; members what concerns their nodes or themselves. `node_id`, `event` filter.',
        ].join(''),
        querystring: AuditQuery,
        response: { 200: pageEnvelope(z.object({ events: z.array(AuditEvent) })), ...errorResponses },
      },
    },
    async (req) => {
      const r = await listAudit(req.ctx, req.query);
      return page(req, { events: r.events }, r);
    },
  );

  app.get(
    '/v1/runmesh/devices/:id/activity',
    {
      config: { scope: 'activity:read' },
      schema: {
        tags,
        summary: 'Activity of a node',
        description: 'Its events (`runmesh.*`, and the runs dispatched to it); accepts the query of GET /v1/activity.',
        params: NodeParams,
        querystring: ActivityQuery.omit({ runmesh_node_id: true }),
        response: { 200: ActivityPage, ...errorResponses },
      },
    },
    async (req) => {
      if (!(await canSeeNode(req.ctx, req.params.id))) throw errors.notFound('node', req.params.id);
      const result = await listActivity(req.ctx, { ...req.query, runmesh_node_id: req.params.id }, { resourceAuthorized: true });
      return page(req, { events: result.events }, result);
    },
  );

  // ---- a device's own routes (its `hgd_` credential) --------------------------------------------------

  app.get(
    '/v1/runmesh/device',
    {
      config: { scope: 'runmesh:device' },
      schema: { tags, summary: 'The calling device’s node (device credential)', response: { 200: envelope(Node), ...errorResponses } },
    },
    async (req) => ok(req, await deviceSelf(req.ctx)),
  );

  app.post(
    '/v1/runmesh/device/unlink',
    {
      config: { scope: 'runmesh:device' },
      schema: {
        tags,
        summary: 'Unlink the calling device (device credential)',
        description: 'The device gives up its credential: its node is revoked ("unlinked by the device").',
        response: { 200: envelope(z.object({ revoked: z.literal(true), node: Node })), ...errorResponses },
      },
    },
    async (req) => ok(req, { revoked: true as const, node: await unlinkSelf(req.ctx) }),
  );

  app.post(
    '/v1/runmesh/runs/:runId/model',
    {
      config: { scope: 'runmesh:device' },
      bodyLimit: 16 * 1024 * 1024,
      schema: {
        tags,
        summary: 'Call the model of a run the device holds (device credential, NDJSON)',
        description: [
          '`messages` (AI SDK model messages), `tools` (`name`, `description`, `parameters` JSON Schema), `system`, `maxTokens`, `temperature`. ',
          'The run’s agent’s model, resolved for the run’s owner (bring-your-own-key secrets resolve), metered against the run. Lines as /v1/model-proxy/stream. ',
          '409 when the run ended or was not accepted by this device.',
        ].join(''),
        params: z.object({ runId: z.string().min(1).max(100) }),
        body: DeviceModelBody,
        produces: ['application/x-ndjson'],
        response: { 200: z.string().describe('NDJSON lines'), ...errorResponses, 502: ErrorBody, 503: ErrorBody, 504: ErrorBody },
      },
    },
    async (req, reply) => {
      const gone = clientGone(reply).signal;
      await sendNdjson(reply, await deviceModel(req.ctx, req.params.runId, req.body, gone), gone);
    },
  );

  app.route({
    method: 'GET',
    url: '/v1/runmesh/connect',
    config: { scope: 'runmesh:device' },
    schema: {
      tags,
      summary: 'A device’s dispatch connection (WebSocket, device credential)',
      description: [
        '`Authorization: Bearer hgd_…`. Server: `hello` (`nodeId`, `heartbeatSeconds`), `run` (`run`: `runId`, `threadId`, `rolloutId`, `agent`, `messages`, `resume`), ',
        '`cancel` (`runId`, `reason`). Device: `heartbeat` (`endpoints`), `accept` (`runId`), `reject` (`runId`, `reason`). Closes 4401 on revocation; ',
        'silent for three heartbeats: closed. See ADR 0029.',
      ].join(''),
      hide: false,
    },
    handler: async (_req, reply) =>
      reply
        .status(426)
        .send({ error: { code: 'invalid_request', message: 'this is a WebSocket: connect with Upgrade: websocket', requestId: _req.id } }),
    wsHandler: (socket, req) => {
      void serveDevice(req.ctx, socket).catch((err) => {
        deps.log.warn({ err }, 'a device connection failed');
        socket.close(1011, 'internal error');
      });
    },
  });

  // The approval page the link URL opens (HTML, public): the device's details, then approval with an API key.
  app.get(
    '/device',
    { config: { auth: 'none' }, schema: { hide: true, querystring: z.object({ code: z.string().max(40).optional() }) } },
    async (req, reply) => {
      const html = await approvalPage(deps, req.query.code ?? '', req.ip);
      return reply
        .type('text/html; charset=utf-8')
        .headers({
          ...noStore,
          'content-security-policy':
            "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'",
          'x-frame-options': 'DENY',
          'referrer-policy': 'no-referrer',
        })
        .send(html);
    },
  );
  app.get('/device/approve.js', { config: { auth: 'none' }, schema: { hide: true } }, async (_req, reply) =>
    reply.type('application/javascript; charset=utf-8').send(APPROVE_SCRIPT),
  );
}
