import type { Readable } from 'node:stream';
import { requireScope, type Ctx } from '../../platform/context.js';
import { ByteLimit, refuseDeclaredLength } from '../../platform/http/byte-limit.js';
import { errors } from '../../platform/http/errors.js';
import type { AgentEntry } from '../../platform/sandboxes/index.js';
import { normalizeSandboxPath } from './paths.js';
import { agentOf } from './service.js';

// Files inside a running sandbox, through its agent. Paths are absolute or relative to /home/user.

/** A folder's entries sorted by name, or a file's entry. */
export async function statPath(ctx: Ctx, id: string, rawPath: string): Promise<{ entries: AgentEntry[] } | { entry: AgentEntry }> {
  requireScope(ctx, 'sandbox:read');
  const { agent } = await agentOf(ctx, id);
  return agent.stat(normalizeSandboxPath(rawPath));
}

/** A file's bytes with their length, read from the agent only once the caller starts sending. */
export async function readFile(ctx: Ctx, id: string, rawPath: string): Promise<{ stream: Readable; size: number }> {
  requireScope(ctx, 'sandbox:read');
  const { agent } = await agentOf(ctx, id);
  return agent.read(normalizeSandboxPath(rawPath));
}

/**
 * Writes `body` to the path (atomically, creating parent folders): 413 `payload_too_large` past the server's
 * upload limit, declared or streamed, and then nothing is written. The caller discards what is left unread.
 */
export async function uploadFile(ctx: Ctx, id: string, rawPath: string, body: Readable, declaredLength?: number): Promise<AgentEntry> {
  requireScope(ctx, 'sandbox:write');
  const limit = ctx.deps.config.uploadLimitBytes;
  const message = `the file is larger than the upload limit of ${limit} bytes`;
  refuseDeclaredLength(declaredLength, limit, message);
  const { agent } = await agentOf(ctx, id);
  const path = normalizeSandboxPath(rawPath);
  const limiter = new ByteLimit(limit, () => errors.tooLarge(message));
  body.pipe(limiter);
  try {
    return await agent.write(path, limiter);
  } catch (err) {
    // The agent reports the aborted upload in its own words; the limit is the cause.
    if (limiter.exceeded) throw errors.tooLarge(message);
    throw err;
  }
}

/** Makes a folder with its parents. */
export async function makeFolder(ctx: Ctx, id: string, rawPath: string): Promise<AgentEntry> {
  requireScope(ctx, 'sandbox:write');
  const { agent } = await agentOf(ctx, id);
  return agent.mkdir(normalizeSandboxPath(rawPath));
}

/** Moves or renames; 409 when the target exists. */
export async function movePath(ctx: Ctx, id: string, from: string, to: string): Promise<AgentEntry> {
  requireScope(ctx, 'sandbox:write');
  const { agent } = await agentOf(ctx, id);
  return agent.move(normalizeSandboxPath(from, 'from'), normalizeSandboxPath(to, 'to'));
}

/** Deletes a file or folder (a folder with entries needs `recursive`); the root folder is never deleted. */
export async function removePath(ctx: Ctx, id: string, rawPath: string, recursive: boolean): Promise<void> {
  requireScope(ctx, 'sandbox:write');
  const { agent } = await agentOf(ctx, id);
  const path = normalizeSandboxPath(rawPath);
  if (path === '/') throw errors.invalidField('path', 'cannot delete the root folder');
  await agent.remove(path, recursive);
}
