import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import Fastify, {
  LogController,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type RawReplyDefaultExpression,
  type RawRequestDefaultExpression,
  type RawServerDefault,
} from 'fastify';
import {
  hasZodFastifySchemaValidationErrors,
  jsonSchemaTransform,
  ResponseSerializationError,
  jsonSchemaTransformObject,
  serializerCompiler,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import { isDeepStrictEqual } from 'node:util';
import FindMyWay from 'find-my-way';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { Authenticate, Credential, Ctx, Deps } from '../context.js';
import { base62 } from '../ids.js';
import type { Scope } from '../scopes.js';
import { AppError, type FieldIssue } from './errors.js';
import { driverErrorToAppError } from '../db/errors.js';
import { bodyDepthProblem } from './json-depth.js';
import { consoleRoutes } from './console.js';
import { instrumentHttp, metricsRoute } from './metrics.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** `none`: public route. Default: a credential is required. */
    auth?: 'none';
    /** Scope the caller must hold (one of them, for a list). A device's credential passes only routes listing `runmesh:device`. */
    scope?: Scope | readonly Scope[];
    /** Let a session with no organization through (profile, create organization). */
    allowNoOrg?: boolean;
    /** `query`: a WebSocket upgrade on this route authenticates itself from its query (and closes with a code). */
    wsAuth?: 'query';
  }
  interface FastifyRequest {
    ctx: Ctx;
  }
  interface FastifyInstance {
    /** The app's authenticator, for transports that authenticate themselves (the threads WebSocket). */
    authenticate: Authenticate;
  }
}

export type App = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, Logger, ZodTypeProvider>;
export type { Authenticate };

/** The credential an HTTP request presents: `X-API-Key` first, else `Authorization: Bearer`; and `X-Org-Id`. */
export function credentialOf(req: FastifyRequest): { credential: Credential; orgIdHint?: string } {
  const header = req.headers['x-api-key'];
  const authorization = req.headers.authorization;
  const credential: Credential = {};
  if (typeof header === 'string' && header.trim()) credential.apiKey = header.trim();
  else if (authorization && /^bearer\s+/i.test(authorization)) credential.bearer = authorization.replace(/^bearer\s+/i, '').trim();
  const org = req.headers['x-org-id'];
  return { credential, ...(typeof org === 'string' && org ? { orgIdHint: org } : {}) };
}

/**
 * Answers with JSON that is serialized already (a page whose rows the database wrote as JSON): Fastify sends a
 * string with a JSON content type as it is. Where responses are validated (tests), the body is parsed and checked
 * against the route's schema for the status, as the serializer checks an object, and it must also hold nothing
 * the schema would have left out, since here nothing strips it.
 */
export function sendJsonText(req: FastifyRequest, reply: FastifyReply, body: string): FastifyReply {
  if (req.ctx.deps.config.validateResponses) {
    const schemas = req.routeOptions.schema?.response as Record<number, z.ZodType> | undefined;
    const schema = schemas?.[reply.statusCode];
    if (!schema) throw new Error(`no response schema for ${reply.statusCode} on ${req.method} ${req.routeOptions.url}`);
    const value: unknown = JSON.parse(body);
    const result = z.safeEncode(schema, value);
    if (result.error) throw new ResponseSerializationError(req.method, req.routeOptions.url ?? req.url, { cause: result.error });
    if (!isDeepStrictEqual(result.data, value)) {
      throw new Error(`${req.method} ${req.routeOptions.url}: the response holds fields its schema does not declare`);
    }
  }
  return reply.type('application/json; charset=utf-8').send(body);
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{8,128}$/;
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

function sendError(req: FastifyRequest, reply: FastifyReply, err: AppError) {
  if (err.headers) reply.headers(err.headers);
  const body: {
    code: string;
    message: string;
    requestId: string;
    issues?: FieldIssue[];
    state?: string;
    activeRunId?: string;
    balanceCents?: number;
    availableCents?: number;
    heldBy?: string;
    minimumTokens?: number;
  } = {
    code: err.code,
    message: err.message,
    requestId: req.id,
  };
  if (err.details?.issues) body.issues = err.details.issues;
  if (typeof err.details?.state === 'string') body.state = err.details.state;
  if (typeof err.details?.activeRunId === 'string') body.activeRunId = err.details.activeRunId;
  if (typeof err.details?.balanceCents === 'number') body.balanceCents = err.details.balanceCents;
  if (typeof err.details?.availableCents === 'number') body.availableCents = err.details.availableCents;
  if (typeof err.details?.heldBy === 'string') body.heldBy = err.details.heldBy;
  if (typeof err.details?.minimumTokens === 'number') body.minimumTokens = err.details.minimumTokens;
  return reply.status(err.status).type('application/json').serializer(JSON.stringify).send({ error: body });
}

/** Maps anything thrown in a route to the one error envelope. */
export function toAppError(err: FastifyError | Error): AppError {
  if (err instanceof AppError) return err;
  const fe = err as FastifyError;
  if (hasZodFastifySchemaValidationErrors(fe)) {
    const where = fe.validationContext ?? 'request';
    const issues = fe.validation.map((v) => ({
      path: `${where}${v.instancePath === '/' ? '' : v.instancePath.replaceAll('/', '.')}`,
      message: v.message ?? 'is invalid',
    }));
    return new AppError('invalid_request', issues.map((i) => `${i.path}: ${i.message}`).join('; '), { issues });
  }
  switch (fe.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new AppError('payload_too_large', 'request body is larger than this server accepts');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new AppError('unsupported_media_type', 'unsupported Content-Type for this route; JSON routes take application/json');
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new AppError('invalid_request', 'body: a JSON body is required when Content-Type is application/json');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new AppError('invalid_request', 'body: is not valid JSON');
  }
  const driver = driverErrorToAppError(err);
  if (driver) return driver;
  if (fe.statusCode === 400 && err instanceof SyntaxError) return new AppError('invalid_request', 'body: is not valid JSON');
  if (fe.statusCode === 413) return new AppError('payload_too_large', fe.message);
  if (fe.statusCode && fe.statusCode >= 400 && fe.statusCode < 500) {
    return new AppError(fe.statusCode === 404 ? 'not_found' : 'invalid_request', fe.message);
  }
  return new AppError('internal', 'internal error; the request id identifies it in the server log');
}

/**
 * The HTTP shell every service shares: zod validation, request ids, the error envelope, 404/405,
 * `X-API-Version`, credentials on every route unless it says `auth: 'none'`, and OpenAPI.
 */
export async function createServer(deps: Deps, authenticate: Authenticate): Promise<App> {
  const { config } = deps;
  const app = Fastify({
    loggerInstance: deps.log,
    bodyLimit: config.bodyLimitBytes,
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : `req_${base62(20)}`;
    },
    logController: new LogController({
      requestIdLogLabel: 'requestId',
      disableRequestLogging: config.logLevel !== 'debug' && config.logLevel !== 'trace',
    }),
    routerOptions: { ignoreTrailingSlash: true },
    // A URL the router cannot decode (bad percent-encoding, an over-long path segment) still gets the envelope.
    frameworkErrors: (err, req, reply) => {
      reply.header('x-request-id', req.id);
      if (req.url.startsWith('/v1')) reply.header('x-api-version', 'v1');
      return sendError(req, reply, new AppError('invalid_request', err.code === 'FST_ERR_BAD_URL' ? 'the URL is not valid' : err.message));
    },
    forceCloseConnections: true,
  }).withTypeProvider<ZodTypeProvider>();

  // JSON routes take JSON only: a text/plain body is a 415, not a string that fails validation.
  app.removeContentTypeParser('text/plain');
  app.setValidatorCompiler(validatorCompiler);
  // Response schemas document the API; validating every response costs time, so it is on in tests only.
  app.setSerializerCompiler(config.validateResponses ? serializerCompiler : () => (data) => JSON.stringify(data));

  // Mirror of the route table to tell 405 from 404.
  const routes = FindMyWay({ ignoreTrailingSlash: true });
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const m of methods) {
      if (!(METHODS as readonly string[]).includes(m)) continue;
      try {
        routes.on(m as (typeof METHODS)[number], route.url, () => undefined);
      } catch {
        // the same method and path registered twice under different constraints
      }
    }
  });

  app.decorate('authenticate', authenticate);
  app.decorateRequest('ctx', null as unknown as Ctx);
  instrumentHttp(app as unknown as FastifyInstance, deps);
  app.addHook('onRequest', async (req, reply) => {
    reply.header('x-request-id', req.id);
    if (req.url.startsWith('/v1')) reply.header('x-api-version', 'v1');
    if (req.is404 || req.routeOptions.config.auth === 'none' || req.routeOptions.url?.startsWith('/v1/docs')) return;
    // A WebSocket that authenticates from its query answers with close codes, not HTTP errors (threads). Only a
    // real upgrade (`Connection: upgrade` too, as Node requires): an `Upgrade` header alone reaches the HTTP handler.
    if (
      req.routeOptions.config.wsAuth === 'query' &&
      req.headers.upgrade?.toLowerCase() === 'websocket' &&
      /(^|,)\s*upgrade\s*(,|$)/i.test(req.headers.connection ?? '')
    )
      return;
    const { credential, orgIdHint } = credentialOf(req);
    const principal = await authenticate(credential, orgIdHint);
    if (!principal.orgId && !req.routeOptions.config.allowNoOrg) {
      throw new AppError('forbidden', 'this request needs an organization: create one with POST /v1/organizations');
    }
    const scope = req.routeOptions.config.scope;
    const wanted: readonly Scope[] = scope === undefined ? [] : typeof scope === 'string' ? [scope] : scope;
    // A device's credential is good for the few routes made for devices, and nothing else (fail closed).
    if (principal.kind === 'device' && !wanted.includes('runmesh:device'))
      throw new AppError('forbidden', 'a device credential is only accepted on the device routes of the mesh');
    if (wanted.length && !wanted.some((s) => principal.scopes.has(s)))
      throw new AppError('forbidden', `this credential lacks the "${wanted.filter((s) => s !== 'runmesh:device').join('" or "')}" scope`);
    req.ctx = { deps, requestId: req.id, principal };
  });

  // An upgrade refused with an HTTP answer (401/403 from authentication, 404, 409...) before the WebSocket plugin
  // took the connection is not closed by the plugin: without this it would stay open after the answer, for as long
  // as the client likes.
  app.addHook('onResponse', async (req, reply) => {
    const socket = req.raw.socket;
    if (req.headers.upgrade === undefined || reply.statusCode < 400 || !socket || socket.destroyed) return;
    socket.end();
    setTimeout(() => socket.destroy(), 1000).unref();
  });

  // Any JSON body nested absurdly deep is refused before validation: fields typed "any JSON" would otherwise be
  // stored as given and overflow the stack when serialised later (a 500). Names the top-level field it is under.
  app.addHook('preValidation', async (req) => {
    const problem = bodyDepthProblem(req.body);
    if (problem) throw new AppError('invalid_request', `${problem.path}: ${problem.message}`, { issues: [problem] });
  });

  app.setErrorHandler((err: FastifyError, req, reply) => {
    const appError = toAppError(err);
    if (appError.status >= 500) req.log.error({ err }, 'request failed');
    return sendError(req, reply, appError);
  });

  app.setNotFoundHandler((req, reply) => {
    const pathOnly = req.url.split('?')[0]!;
    const allowed = METHODS.filter((m) => m !== req.method && routes.find(m, pathOnly));
    if (allowed.length > 0) {
      reply.header('allow', allowed.join(', '));
      return sendError(req, reply, new AppError('method_not_allowed', `${req.method} is not allowed on ${pathOnly}; use ${allowed.join(', ')}`));
    }
    return sendError(req, reply, new AppError('not_found', `no route ${req.method} ${pathOnly}`));
  });

  await app.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Hangar API',
        version: 'v1',
        description:
          'Self-hostable cloud platform for AI agents. Authenticate with `X-API-Key: hgr_live_...` or `Authorization: Bearer <API key or session token>`.',
      },
      servers: [{ url: config.urls.orchestrator }],
      components: {
        securitySchemes: {
          apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key' },
          bearer: { type: 'http', scheme: 'bearer' },
        },
      },
      security: [{ apiKey: [] }, { bearer: [] }],
    },
    transform: jsonSchemaTransform,
    transformObject: jsonSchemaTransformObject,
  });
  await app.register(fastifySwaggerUi, { routePrefix: '/v1/docs', uiConfig: { deepLinking: true }, staticCSP: false });
  app.get('/v1/openapi.json', { config: { auth: 'none' }, schema: { hide: true } }, async () => app.swagger());
  app.get('/healthz', { config: { auth: 'none' }, schema: { hide: true } }, async () => ({ ok: true }));
  metricsRoute(app as unknown as FastifyInstance, deps);
  consoleRoutes(app as unknown as FastifyInstance, config.consoleDir);
  return app;
}
