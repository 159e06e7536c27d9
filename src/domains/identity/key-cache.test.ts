import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, type Harness } from '../../../test/harness.js';
import { markRevocation, revocationMark } from '../../platform/revocations.js';
import { KEY_CACHE_TTL_MS, KeyCache, type KnownKey } from './key-cache.js';

const key = (id: string): KnownKey => ({
  id,
  orgId: 'o1',
  userId: 'u1',
  role: 'admin',
  scopes: new Set(['org:read']),
  expiresAt: null,
  expiresMs: Number.POSITIVE_INFINITY,
  lastUsedMs: 0,
});

describe('API key cache', () => {
  it('keeps a key under the mark it was read after, for its TTL', () => {
    const cache = new KeyCache();
    cache.put('h1', key('k1'), 'm1', 1000);
    expect(cache.get('h1', 'm1', 1000 + KEY_CACHE_TTL_MS - 1)?.id).toBe('k1');
    expect(cache.get('h1', 'm1', 1000 + KEY_CACHE_TTL_MS)).toBeUndefined();
    // Dropped, not just hidden: a later read under the same mark finds nothing either.
    expect(cache.get('h1', 'm1', 1001)).toBeUndefined();
  });

  it('serves nothing read under another mark, and drops it', () => {
    const cache = new KeyCache();
    cache.put('h1', key('k1'), 'm1', 0);
    expect(cache.get('h1', 'm2', 1)).toBeUndefined();
    expect(cache.get('h1', 'm1', 1)).toBeUndefined();
  });

  it('a lookup that read the mark before a revocation leaves an entry the next request will not use', () => {
    const cache = new KeyCache();
    const before = 'm1'; // read by the lookup, which then reads the key, still valid
    cache.put('h1', key('k1'), before, 0);
    const after = 'm2'; // the revocation committed meanwhile, with a new mark
    expect(cache.get('h1', after, 1)).toBeUndefined();
  });
});

describe('revocation mark', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness();
  });
  afterAll(() => h.close());

  it('is empty before the first revocation and new after each, inside the transaction that revokes', async () => {
    const db = h.deps.db.kysely;
    const seen = new Set([await revocationMark(db)]);
    for (let i = 0; i < 3; i++) {
      await markRevocation(db);
      seen.add(await revocationMark(db));
    }
    expect(seen.size).toBe(4);

    const committed = await revocationMark(db);
    await expect(
      db.transaction().execute(async (trx) => {
        await markRevocation(trx);
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    expect(await revocationMark(db)).toBe(committed);
  });
});
