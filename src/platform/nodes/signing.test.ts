import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { parseConfig } from '../../config.js';
import type { Deps } from '../context.js';
import { AppError } from '../http/errors.js';
import { RuntimeState } from '../state.js';
import { HOP_WINDOW_MS, signHop, verifyHop } from './signing.js';

// The hop signature between replicas (ADR 0024) on its own: what a receiving node accepts and refuses.

const secret = randomBytes(32).toString('hex');
const dataDir = mkdtempSync(path.join(tmpdir(), 'hangar-hops-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));
const node = (id: string, key = secret) =>
  ({ config: parseConfig({ HANGAR_SECRET_KEY: key, HANGAR_NODE_ID: id, HANGAR_DATA_DIR: dataDir }), state: new RuntimeState() }) as unknown as Deps;
const caller = { 'x-api-key': 'hgr_live_example' };

function refusal(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe('unauthenticated');
    return (err as AppError).message;
  }
  throw new Error('expected a refusal');
}

afterEach(() => vi.useRealTimers());

describe('node-forwarding signatures', () => {
  it('a request without hop headers is a client’s (null); a genuine hop names its sender, once', () => {
    const a = node('a');
    const b = node('b');
    expect(verifyHop(b, { method: 'GET', url: '/v1/sandboxes/x', headers: caller })).toBeNull();
    const hop = signHop(a, 'GET', '/v1/sandboxes/x', 'b', caller);
    expect(verifyHop(b, { method: 'GET', url: '/v1/sandboxes/x', headers: { ...caller, ...hop } })).toEqual({ from: 'a' });
    expect(refusal(() => verifyHop(b, { method: 'GET', url: '/v1/sandboxes/x', headers: { ...caller, ...hop } }))).toContain('replayed');
  });

  it('refuses a hop outside the time window, on another method, path or credential, or signed with another secret', () => {
    const a = node('a');
    const b = node('b');
    vi.useFakeTimers({ now: Date.now() });
    const old = signHop(a, 'GET', '/v1/sandboxes/x', 'b', caller);
    vi.setSystemTime(Date.now() + HOP_WINDOW_MS + 1000);
    expect(refusal(() => verifyHop(b, { method: 'GET', url: '/v1/sandboxes/x', headers: { ...caller, ...old } }))).toContain('expired');
    vi.useRealTimers();
    const hop = () => signHop(a, 'GET', '/v1/sandboxes/x', 'b', caller);
    expect(refusal(() => verifyHop(b, { method: 'DELETE', url: '/v1/sandboxes/x', headers: { ...caller, ...hop() } }))).toContain('bad signature');
    expect(refusal(() => verifyHop(b, { method: 'GET', url: '/v1/sandboxes/y', headers: { ...caller, ...hop() } }))).toContain('bad signature');
    expect(refusal(() => verifyHop(b, { method: 'GET', url: '/v1/sandboxes/x', headers: { 'x-api-key': 'hgr_live_other', ...hop() } }))).toContain(
      'bad signature',
    );
    const stranger = signHop(node('a', randomBytes(32).toString('hex')), 'GET', '/v1/sandboxes/x', 'b', caller);
    expect(refusal(() => verifyHop(b, { method: 'GET', url: '/v1/sandboxes/x', headers: { ...caller, ...stranger } }))).toContain('bad signature');
    expect(refusal(() => verifyHop(node('c'), { method: 'GET', url: '/v1/sandboxes/x', headers: { ...caller, ...hop() } }))).toContain(
      'another node',
    );
    const { 'x-hangar-node-nonce': _, ...partial } = hop();
    expect(refusal(() => verifyHop(b, { method: 'GET', url: '/v1/sandboxes/x', headers: { ...caller, ...partial } }))).toContain('incomplete');
  });
});
