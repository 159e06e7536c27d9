import { describe, expect, it } from 'vitest';
import { bodyDepthProblem, MAX_BODY_DEPTH } from './json-depth.js';

const nested = (depth: number): unknown => {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = [v];
  return v;
};

describe('the request body depth check', () => {
  it('names the top-level field of a body nested too deep', () => {
    expect(bodyDepthProblem({ ok: nested(3) })).toBeNull();
    expect(bodyDepthProblem({ a: 1, deep: nested(MAX_BODY_DEPTH + 5) })).toEqual({
      path: 'body.deep',
      message: `is nested more than ${MAX_BODY_DEPTH} levels deep`,
    });
    expect(bodyDepthProblem([1, nested(MAX_BODY_DEPTH + 5)])?.path).toBe('body.1');
  });

  // The attack: a route that takes its body raw (a webhook verifying a signature over the bytes) gets a Buffer,
  // and walking it as an object visits every byte. Unauthenticated, a few megabytes cost seconds of CPU each.
  it('does not walk a raw body: a large Buffer costs next to nothing', () => {
    const raw = Buffer.alloc(8 * 1024 * 1024, 0x61);
    const before = process.cpuUsage();
    expect(bodyDepthProblem(raw)).toBeNull();
    expect(bodyDepthProblem(new Uint8Array(raw))).toBeNull();
    const used = process.cpuUsage(before);
    // Walking it took tens of seconds; not walking it takes microseconds. The bound leaves room for any machine.
    expect((used.user + used.system) / 1000).toBeLessThan(1000);
  });
});
