import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { brotliCompressSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { CONSOLE_DIST } from '../../src/platform/http/console.js';

const kB = (n: number) => Math.round(n / 102.4) / 10;
const br = (file: string) => brotliCompressSync(readFileSync(file)).length;

describe('the console build (ADR 0047: size budget, nothing inline, nothing from elsewhere)', () => {
  const index = readFileSync(path.join(CONSOLE_DIST, 'index.html'), 'utf8');
  const assets = readdirSync(path.join(CONSOLE_DIST, 'assets'));

  it('index.html loads its own files only, with no inline script or style', () => {
    expect(index).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(index).not.toMatch(/<style|\sstyle=/);
    for (const m of index.matchAll(/(?:src|href)="([^"]+)"/g)) expect(m[1], 'a file of its own').toMatch(/^\/[^/]/);
  });

  it('the first load stays under 120 kB compressed; any other chunk under 120 kB; all of it under 400 kB', () => {
    const first = [...index.matchAll(/(?:src|href)="\/(assets\/[^"]+\.(?:js|css))"/g)].map((m) => m[1]!);
    expect(first.length).toBeGreaterThanOrEqual(2);
    const firstBytes = first.reduce((n, f) => n + br(path.join(CONSOLE_DIST, f)), 0);
    expect(kB(firstBytes), `first load: ${first.join(', ')}`).toBeLessThan(120);
    let total = 0;
    for (const f of assets) {
      const size = br(path.join(CONSOLE_DIST, 'assets', f));
      total += size;
      expect(kB(size), f).toBeLessThan(120);
    }
    expect(kB(total)).toBeLessThan(400);
  });

  it('no script loads anything from another origin or evaluates strings', () => {
    for (const f of assets.filter((a) => a.endsWith('.js'))) {
      const js = readFileSync(path.join(CONSOLE_DIST, 'assets', f), 'utf8');
      expect(js, f).not.toMatch(/\bnew Function\(|\beval\(/);
      expect(js, f).not.toMatch(/https?:\/\/(?:cdn|unpkg|fonts\.)/);
    }
  });
});
