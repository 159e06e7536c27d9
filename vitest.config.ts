import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // Tests import the SDK as a user would (`@hangar/sdk`), from its sources: no build step before `npm test`.
    alias: { '@hangar/sdk': fileURLToPath(new URL('./packages/sdk/src/index.ts', import.meta.url)) },
  },
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
