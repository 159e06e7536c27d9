import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { GENERATED_TYPES, generateSdkTypes } from '../packages/sdk/scripts/generate.js';

describe('the SDK’s generated types', () => {
  it('packages/sdk/src/generated/openapi.ts matches docs/openapi.json (run `npm run openapi` after changing a route)', async () => {
    const doc = JSON.parse(readFileSync(new URL('../docs/openapi.json', import.meta.url), 'utf8')) as Record<string, unknown>;
    const committed = readFileSync(GENERATED_TYPES, 'utf8');
    // Compared as text: a line of difference fails (not the whole file printed).
    const expected = (await generateSdkTypes(doc)).split('\n');
    const actual = committed.split('\n');
    const first = expected.findIndex((line, i) => line !== actual[i]);
    expect(first === -1 && actual.length === expected.length ? 'in sync' : `differs from line ${first + 1}: ${actual[first]}`).toBe('in sync');
  });
});
