import { renameSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import react from '@vitejs/plugin-react';
import { defineConfig, type Plugin } from 'vite';

const dist = fileURLToPath(new URL('./dist', import.meta.url));
const staging = `${dist}.tmp-${process.pid}`;

/** Builds beside dist/ and swaps it in whole, so a server starting (or a test reading it) never sees half a build. */
const swapIn = (): Plugin => ({
  name: 'hangar-swap-dist',
  apply: 'build',
  closeBundle() {
    const old = `${dist}.old-${process.pid}`;
    try {
      renameSync(dist, old);
    } catch {
      // no earlier build
    }
    renameSync(staging, dist);
    rmSync(old, { recursive: true, force: true });
  },
});

// The console is built into dist/ by the setup script (`npm install`) and served by `hangar serve` at /. The SDK
// is taken from its sources (no separate build step), as the tests take it.
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/',
  plugins: [react(), swapIn()],
  resolve: { alias: { '@hangar/sdk': fileURLToPath(new URL('../sdk/src/index.ts', import.meta.url)) } },
  build: {
    outDir: staging,
    emptyOutDir: true,
    assetsDir: 'assets',
    // Nothing inlined as data: URLs, so the Content-Security-Policy can stay strict.
    assetsInlineLimit: 0,
    sourcemap: false,
    chunkSizeWarningLimit: 400,
  },
});
