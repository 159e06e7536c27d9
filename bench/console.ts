/**
 * `console`: how fast the web console's pages load in a real browser (headless Debian Chromium driven by
 * playwright-core) on the embedded SQLite default, for an organization of --events (10,000) activity events, a few
 * hundred threads and some agents. Hangar is built in this process (lib/in-process.ts) and serves the console as
 * `npm start` does.
 *   Each round, for every page (overview, threads, agents, sandboxes, activity, settings/keys): a fresh browser
 *   context (empty cache: a first visit) and a reload of it (a return visit: cached assets), timed from the
 *   navigation until the page's content is on screen (the page has its heading and nothing in it still says
 *   "Loading").
 *   Baseline, same browser and server, interleaved with the pages: a navigation to /healthz (a tiny document
 *   from the same process), so the ratio page/baseline holds on a busy machine.
 * Aim (issue 22): every page under 1 s, first visit (median of --rounds, 7).
 */
import { parseArgs } from 'node:util';
import type { Page } from 'playwright-core';
import { recordActivity } from '../src/domains/activity/index.js';
import { withTx } from '../src/platform/context.js';
import { launchBrowser } from '../test/console/browser.js';
import type { Aim, BenchOutcome } from './lib/results.js';
import { startInProcessHangar, stopInProcessHangar } from './lib/in-process.js';

export const description = 'web console: page loads in headless Chromium with 10,000 activity events (first and return visit) vs a tiny document';

const PAGES = [
  { name: 'overview', path: '/' },
  { name: 'threads', path: '/threads' },
  { name: 'agents', path: '/agents' },
  { name: 'sandboxes', path: '/sandboxes' },
  { name: 'activity', path: '/activity' },
  { name: 'keys', path: '/settings/keys' },
] as const;

const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** Until the page shows its content: a heading in <main> and no loading placeholder left in it. */
async function contentShown(page: Page): Promise<void> {
  await page.waitForFunction(
    () => {
      const main = document.querySelector('main');
      return !!main && !!main.querySelector('h1') && !main.querySelector('.loading');
    },
    undefined,
    { polling: 'raf', timeout: 30_000 },
  );
}

export async function run(argv: string[]): Promise<BenchOutcome> {
  const { values } = parseArgs({
    args: argv,
    options: { events: { type: 'string', default: '10000' }, rounds: { type: 'string', default: '7' }, threads: { type: 'string', default: '300' } },
    allowPositionals: false,
  });
  const events = Number(values.events);
  const rounds = Number(values.rounds);
  const hangar = await startInProcessHangar('console');
  const browser = await launchBrowser();
  try {
    const headers = { 'x-api-key': hangar.apiKey, 'content-type': 'application/json' };
    const post = async (path: string, body: unknown) => {
      const res = await fetch(`${hangar.url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
      if (!res.ok) throw new Error(`POST ${path}: ${res.status} ${await res.text()}`);
      return ((await res.json()) as { data: { id: string } }).data;
    };
    const t0 = performance.now();
    for (let i = 0; i < 20; i++)
      await post('/v1/agents', { slug: `agent-${i}`, model: 'byok/anthropic/claude-sonnet-4-5', instructions: `Agent number ${i}.` });
    for (let i = 0; i < Number(values.threads); i++) await post('/v1/threads', { title: `Thread ${i}` });
    const batch = 1000;
    for (let done = 0; done < events; done += batch) {
      await withTx({ ...hangar.ownerCtx }, async (tx) => {
        for (let i = done; i < Math.min(events, done + batch); i++) {
          await recordActivity(tx, {
            resourceType: 'thread',
            resourceId: `thr_bench${i % 97}`,
            eventType: i % 10 === 0 ? 'run.failed' : 'run.completed',
            status: i % 10 === 0 ? 'failed' : 'completed',
            title: `Run ${i}`,
            summary: `Benchmark event ${i}`,
          });
        }
      });
    }
    console.log(`setup: 20 agents, ${values.threads} threads, ${events} activity events in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

    // One signed-in state (the credential in local storage), reused by every fresh context.
    const first = await browser.newContext();
    const p = await first.newPage();
    await p.goto(hangar.url);
    await p.getByLabel('API key or session token').fill(hangar.apiKey);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.getByRole('button', { name: 'Sign out' }).waitFor();
    const storageState = await first.storageState();
    await first.close();

    const cold: Record<string, number[]> = Object.fromEntries(PAGES.map((pg) => [pg.name, []]));
    const warm: Record<string, number[]> = Object.fromEntries(PAGES.map((pg) => [pg.name, []]));
    const baseline: number[] = [];
    for (let r = 0; r < rounds + 1; r++) {
      for (const pg of PAGES) {
        const context = await browser.newContext({ storageState, viewport: { width: 1280, height: 900 } });
        const page = await context.newPage();
        let t = performance.now();
        await page.goto(`${hangar.url}/healthz`);
        const base = performance.now() - t;
        t = performance.now();
        await page.goto(`${hangar.url}${pg.path}`);
        await contentShown(page);
        const c = performance.now() - t;
        t = performance.now();
        await page.reload();
        await contentShown(page);
        const w = performance.now() - t;
        await context.close();
        if (r === 0) continue; // warm-up round: the server's and the browser's first compilations
        baseline.push(base);
        cold[pg.name]!.push(c);
        warm[pg.name]!.push(w);
      }
    }
    const base = median(baseline);
    const figures: Record<string, number> = { 'baseline.healthz_ms': Math.round(base * 10) / 10 };
    const aims: Aim[] = [];
    console.log(`\nbaseline /healthz: median ${base.toFixed(1)} ms over ${baseline.length} navigations`);
    console.log('page         first visit ms  (ratio)   return visit ms  (ratio)');
    for (const pg of PAGES) {
      const c = median(cold[pg.name]!);
      const w = median(warm[pg.name]!);
      figures[`${pg.name}.first_ms`] = Math.round(c);
      figures[`${pg.name}.return_ms`] = Math.round(w);
      figures[`${pg.name}.first_ratio`] = Math.round((c / base) * 10) / 10;
      console.log(
        `${pg.name.padEnd(12)} ${c.toFixed(0).padStart(14)}  (${(c / base).toFixed(1).padStart(5)})  ${w.toFixed(0).padStart(15)}  (${(w / base).toFixed(1).padStart(5)})`,
      );
      aims.push({ name: `${pg.name} page loads in under 1 s (first visit)`, figure: `${pg.name}.first_ms`, target: '< 1000', met: c < 1000 });
    }
    const worst = Math.max(...PAGES.map((pg) => median(cold[pg.name]!)));
    return {
      summary: `console: slowest page ${worst.toFixed(0)} ms first visit with ${events} activity events (aim < 1000 ms: ${worst < 1000 ? 'met' : 'NOT met'}); baseline ${base.toFixed(0)} ms`,
      figures,
      aims,
    };
  } finally {
    await browser.close().catch(() => undefined);
    await stopInProcessHangar(hangar);
  }
}
