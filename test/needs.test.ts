import { describe, expect, it } from 'vitest';
import { verdict } from './needs.js';

describe('a suite that needs something of the host', () => {
  const missing = { what: 'the isolation layer', present: false };

  it('runs where it is present, on CI or not', () => {
    expect(verdict({ ...missing, present: true }, false)).toBe('run');
    expect(verdict({ ...missing, present: true }, true)).toBe('run');
  });

  it('is skipped where it is missing on a developer’s machine, and fails on CI', () => {
    expect(verdict(missing, false)).toBe('skip');
    expect(verdict(missing, true)).toBe('fail');
  });

  it('is skipped on CI only where that CI pass legitimately lacks it', () => {
    expect(verdict({ ...missing, requiredOnCi: false }, true)).toBe('skip');
  });
});
