import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants as zlib, gzipSync } from 'node:zlib';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import mime from 'mime';
import { AppError } from './errors.js';

/** Where `npm install` builds the console (packages/console, Vite): served as it is, from memory. */
export const CONSOLE_DIST = fileURLToPath(new URL('../../../packages/console/dist', import.meta.url));

/** The console's own paths (its client-side routes): each answers index.html, so a reload or a shared link works. */
export const CONSOLE_PAGES = ['threads', 'agents', 'sandboxes', 'templates', 'activity', 'settings', 'link', 'sign-in'] as const;

/**
 * The console's Content-Security-Policy: its own scripts and styles only (no inline code, no eval, no CDN), API
 * calls and WebSockets to this origin only, and never framed.
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data: blob:",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

interface Asset {
  body: Buffer;
  gzip: Buffer | null;
  br: Buffer | null;
  compressible: boolean;
  type: string;
  etag: string;
  cache: string;
}

/**
 * Reads the built console into memory; null when it has not been built. Each file is compressed on its first request
 * that accepts it (then kept): compressing all of it here added ~170 ms to every start-up, a test app's included.
 */
export function loadConsole(dir = CONSOLE_DIST): Map<string, Asset> | null {
  if (!existsSync(path.join(dir, 'index.html'))) return null;
  const assets = new Map<string, Asset>();
  const walk = (sub: string) => {
    for (const name of readdirSync(path.join(dir, sub))) {
      const rel = sub ? `${sub}/${name}` : name;
      const full = path.join(dir, rel);
      if (statSync(full).isDirectory()) {
        walk(rel);
        continue;
      }
      const body = readFileSync(full);
      const type = mime.getType(name) ?? 'application/octet-stream';
      const compressible = /^(text\/|application\/(json|manifest)|image\/svg)/.test(type) && body.length > 512;
      assets.set(`/${rel}`, {
        body,
        gzip: null,
        br: null,
        compressible,
        type: type.startsWith('text/') ? `${type}; charset=utf-8` : type,
        etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`,
        // Vite names what is under assets/ by its content hash: cached for good. The rest is checked each time.
        cache: rel.startsWith('assets/') ? 'public, max-age=31536000, immutable' : 'no-cache',
      });
    }
  };
  walk('');
  return assets;
}

function send(req: FastifyRequest, reply: FastifyReply, asset: Asset) {
  reply
    .header('content-type', asset.type)
    .header('cache-control', asset.cache)
    .header('etag', asset.etag)
    .header('vary', 'accept-encoding')
    .header('content-security-policy', CONSOLE_CSP)
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
    .header('cross-origin-opener-policy', 'same-origin');
  if (req.headers['if-none-match'] === asset.etag) return reply.code(304).send();
  const accepts = String(req.headers['accept-encoding'] ?? '');
  if (asset.compressible && /\bbr\b/.test(accepts)) {
    asset.br ??= brotliCompressSync(asset.body, { params: { [zlib.BROTLI_PARAM_QUALITY]: 9 } });
    return reply.header('content-encoding', 'br').send(asset.br);
  }
  if (asset.compressible && /\bgzip\b/.test(accepts)) {
    asset.gzip ??= gzipSync(asset.body, { level: 9 });
    return reply.header('content-encoding', 'gzip').send(asset.gzip);
  }
  return reply.send(asset.body);
}

/**
 * Serves the web console at / (ADR 0047): the app for `/` and its pages, its hashed files under /assets. No second
 * server; the console calls the public API like any client. Where it was not built, its paths answer 503 saying how.
 */
export function consoleRoutes(app: FastifyInstance, dir = CONSOLE_DIST): void {
  const assets = loadConsole(dir);
  const opts = { config: { auth: 'none' }, schema: { hide: true } } as const;
  const page = async (req: FastifyRequest, reply: FastifyReply) => {
    const index = assets?.get('/index.html');
    if (!index) {
      throw new AppError(
        'service_unavailable',
        'the web console is not built on this installation: run `npm install` (or `npm run build -w @hangar/console`)',
      );
    }
    return send(req, reply, index);
  };
  app.get('/', opts, page);
  for (const p of CONSOLE_PAGES) {
    app.get(`/${p}`, opts, page);
    app.get(`/${p}/*`, opts, page);
  }
  const file = async (req: FastifyRequest, reply: FastifyReply) => {
    const asset = assets?.get(req.url.split('?')[0]!);
    if (!asset) throw new AppError('not_found', `no console file ${req.url.split('?')[0]}`);
    return send(req, reply, asset);
  };
  app.get('/assets/*', opts, file);
  for (const rel of assets?.keys() ?? []) {
    if (!rel.startsWith('/assets/') && rel !== '/index.html') app.get(rel, opts, file);
  }
}
