import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { testDatabaseUrl, testRedisUrl } from '../../../test/harness.js';
import { MemoryBus, RedisBus, subscribeParsed, type Bus } from './index.js';
import { describeNeeding } from '../../../test/needs.js';
import { until } from '../../../test/helpers.js';

function contract(make: () => Bus) {
  it('delivers to every subscriber of a channel, in order, and stops after unsubscribe', async () => {
    const bus = make();
    const channel = `t-${randomBytes(4).toString('hex')}`;
    const a: unknown[] = [];
    const b: unknown[] = [];
    const offA = await bus.subscribe(channel, (m) => a.push(m));
    await bus.subscribe(channel, (m) => b.push(m));
    await bus.subscribe(`${channel}-other`, () => a.push('wrong channel'));
    for (let i = 0; i < 5; i++) await bus.publish(channel, { seq: i });
    await until('five messages to the second subscriber', () => b.length === 5, 3000);
    expect(a).toEqual([0, 1, 2, 3, 4].map((seq) => ({ seq })));
    expect(b).toEqual(a);
    await offA();
    await bus.publish(channel, { seq: 5 });
    await until('the sixth message to the second subscriber', () => b.length === 6, 3000);
    expect(a).toHaveLength(5);
    await bus.close();
  });
}

describe('in-process bus', () => {
  contract(() => new MemoryBus());

  it('hands subscribers a copy, never the publisher’s object', async () => {
    const bus = new MemoryBus();
    const seen: { n: number }[] = [];
    await bus.subscribe('c', (m) => seen.push(m as { n: number }));
    const msg = { n: 1 };
    await bus.publish('c', msg);
    msg.n = 2;
    expect(seen[0]).toEqual({ n: 1 });
  });
});

describe('subscribeParsed', () => {
  it('hands the handler only messages its schema accepts, parsed; the rest go to onInvalid', async () => {
    const bus = new MemoryBus();
    const got: { n: number }[] = [];
    const invalid: unknown[] = [];
    await subscribeParsed(
      bus,
      'c',
      z.object({ n: z.number() }),
      (m) => got.push(m),
      (error, m) => invalid.push([error.issues[0]?.path, m]),
    );
    await bus.publish('c', { n: 1, extra: true });
    await bus.publish('c', { n: 'one' });
    await bus.publish('c', 'text');
    await bus.publish('c', { n: 2 });
    expect(got).toEqual([{ n: 1 }, { n: 2 }]);
    expect(invalid).toEqual([
      [['n'], { n: 'one' }],
      [[], 'text'],
    ]);
    await bus.close();
  });
});

// Runs in CI's PostgreSQL+Redis pass (HANGAR_TEST_REDIS_URL set); the default pass has no Redis to talk to, but
// a PostgreSQL pass on CI (HANGAR_TEST_DATABASE_URL set) without Redis fails here rather than skipping the suite.
const redisNeed = {
  what: 'Redis (HANGAR_TEST_REDIS_URL)',
  present: Boolean(testRedisUrl),
  requiredOnCi: Boolean(testDatabaseUrl),
  fix: 'start Redis and set HANGAR_TEST_REDIS_URL beside HANGAR_TEST_DATABASE_URL, as .ci/run does',
};
describeNeeding(redisNeed, 'Redis bus', () => {
  contract(() => new RedisBus(testRedisUrl!, `hangar-test-${randomBytes(4).toString('hex')}:`));

  it('fans out across two bus instances, as across two replicas', async () => {
    const prefix = `hangar-test-${randomBytes(4).toString('hex')}:`;
    const one = new RedisBus(testRedisUrl!, prefix);
    const two = new RedisBus(testRedisUrl!, prefix);
    const got: unknown[] = [];
    await two.subscribe('thread:1', (m) => got.push(m));
    await one.publish('thread:1', { hello: 'replica' });
    await until('the message on the other replica', () => got.length === 1, 3000);
    expect(got).toEqual([{ hello: 'replica' }]);
    await Promise.all([one.close(), two.close()]);
  });
});
