import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, type Harness } from '../../test/harness.js';
import { until } from '../../test/helpers.js';
import { cronForPeriod, recurring } from './jobs.js';

describe('recurring work', () => {
  it('turns whole clock steps into cron, and nothing else', () => {
    expect(cronForPeriod(60_000)).toBe('* * * * *');
    expect(cronForPeriod(10 * 60_000)).toBe('*/10 * * * *');
    expect(cronForPeriod(3_600_000)).toBe('0 * * * *');
    expect(cronForPeriod(6 * 3_600_000)).toBe('0 */6 * * *');
    expect(cronForPeriod(86_400_000)).toBe('0 0 * * *');
    for (const ms of [7 * 60_000, 90_000, 5 * 3_600_000, 2 * 86_400_000, 5000, 50]) expect(cronForPeriod(ms), String(ms)).toBeNull();
  });

  describe('on the app', () => {
    let h: Harness;
    beforeAll(async () => {
      h = await createHarness();
    });
    afterAll(() => h?.close());

    it('puts the installation-wide rounds on the engine’s schedules', async () => {
      const rows = await h.deps.db.kysely.selectFrom('job_schedules').select(['name', 'cron']).execute();
      const byName = Object.fromEntries(rows.map((r) => [r.name, r.cron]));
      expect(byName).toMatchObject({
        'oauth.flow_sweep': '*/10 * * * *',
        'billing.stale_auto_topups': '* * * * *',
        'billing.runtime_estimate': '* * * * *',
        'billing.storage_charge': '0 0 * * *',
        'tools.mcp_refresh': '*/5 * * * *',
      });
    });

    it('runs a scheduled round through the engine when its tick comes, once however often the tick is seen', async () => {
      let runs = 0;
      await recurring(h.deps, 'test.recurring', 60_000, async () => {
        runs++;
      });
      const engine = h.deps.jobs as typeof h.deps.jobs & { tick(now?: Date): Promise<number> };
      const later = new Date(Date.now() + 61_000);
      expect(await engine.tick(later)).toBeGreaterThanOrEqual(1);
      await engine.tick(later);
      await until('the round ran', () => runs > 0, 10_000);
      await new Promise((r) => setTimeout(r, 300));
      expect(runs).toBe(1);
    });

    it('keeps a period the engine’s cron cannot express on a timer', async () => {
      let runs = 0;
      const timer = await recurring(h.deps, 'test.fast', 40, async () => {
        runs++;
      });
      await until('the timer ran twice', () => runs >= 2, 5_000);
      await timer.stop();
      const row = await h.deps.db.kysely.selectFrom('job_schedules').select('name').where('name', '=', 'test.fast').executeTakeFirst();
      expect(row).toBeUndefined();
    });
  });
});
