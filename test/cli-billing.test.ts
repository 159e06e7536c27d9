import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testDatabaseUrl } from './harness.js';

const BIN = path.resolve(import.meta.dirname, '../bin/hangar.js');

// Each command is a fresh process through tsx: allow for a loaded machine.
describe('hangar promo', () => {
  let env: Record<string, string>;
  let dataDir: string;
  const schema = `cli_promo_${randomBytes(5).toString('hex')}`;

  beforeAll(() => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'hangar-cli-promo-'));
    env = { ...(process.env as Record<string, string>), HANGAR_DATA_DIR: dataDir, LOG_LEVEL: 'silent' };
    delete env.DATABASE_URL;
    delete env.HANGAR_SECRET_KEY;
    if (testDatabaseUrl) env.DATABASE_URL = `${testDatabaseUrl}?schema=${schema}`;
  });
  afterAll(async () => {
    rmSync(dataDir, { recursive: true, force: true });
    if (testDatabaseUrl) {
      const client = new pg.Client({ connectionString: testDatabaseUrl });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.end();
    }
  });

  const run = (args: string[]) => spawnSync(process.execPath, [BIN, ...args], { env, encoding: 'utf8', timeout: 120_000 });

  it('creates codes, generated or given, and lists them with their terms', () => {
    const empty = run(['promo', 'list']);
    expect(empty.status, empty.stderr).toBe(0);
    expect(empty.stdout.trim()).toBe('no promo codes');

    const generated = run(['promo', 'create', '--credits', '500', '--max-redemptions', '3']);
    expect(generated.status, generated.stderr).toBe(0);
    expect(generated.stdout.trim()).toMatch(/^[A-HJKMNP-Z2-9]{12} {2}500 cents \(5\.00 USD\) per organization, 0\/3 redeemed, never expires$/);
    const generatedCode = generated.stdout.trim().split(' ')[0];

    const given = run([
      'promo',
      'create',
      '--credits',
      '1250',
      '--max-redemptions',
      '100',
      '--code',
      'launch-week',
      '--expires',
      '2099-06-30',
      '--json',
    ]);
    expect(given.status, given.stderr).toBe(0);
    expect(JSON.parse(given.stdout)).toMatchObject({
      code: 'LAUNCH-WEEK',
      creditsCents: 1250,
      maxRedemptions: 100,
      redemptions: 0,
      expiresAt: '2099-07-01T00:00:00.000Z',
    });

    const listed = run(['promo', 'list', '--json']);
    expect(listed.status, listed.stderr).toBe(0);
    expect(
      JSON.parse(listed.stdout)
        .map((p: { code: string }) => p.code)
        .sort(),
    ).toEqual([generatedCode, 'LAUNCH-WEEK'].sort());
    const text = run(['promo', 'list']);
    expect(text.stdout).toContain('LAUNCH-WEEK  1250 cents (12.50 USD) per organization, 0/100 redeemed, expires 2099-07-01T00:00:00.000Z');
  }, 600_000);

  it('refuses bad input with exit code 2 and one line naming the flag', () => {
    for (const [args, message] of [
      [['promo', 'create', '--max-redemptions', '3'], /needs --credits/],
      [['promo', 'create', '--credits', 'five', '--max-redemptions', '3'], /--credits must be a whole number/],
      [['promo', 'create', '--credits', '500', '--max-redemptions', '3', '--expires', '2001-01-01'], /--expires: must be in the future/],
      [['promo', 'create', '--credits', '500', '--max-redemptions', '3', '--code', 'Launch-Week'], /already exists/],
      [['promo', 'redeem'], /usage: hangar promo/],
    ] as const) {
      const res = run([...args]);
      expect(res.status, args.join(' ')).toBe(2);
      expect(res.stderr.trim().split('\n'), res.stderr).toHaveLength(1);
      expect(res.stderr).toMatch(message);
      expect(res.stdout).toBe('');
    }
  }, 600_000);
});

describe('hangar plans', () => {
  let env: Record<string, string>;
  let dataDir: string;
  const schema = `cli_plans_${randomBytes(5).toString('hex')}`;

  beforeAll(() => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'hangar-cli-plans-'));
    const plansFile = path.join(dataDir, 'plans.json');
    writeFileSync(plansFile, JSON.stringify({ plans: [{ id: 'team', name: 'Team', includedMonthlyCents: 3000 }] }));
    env = { ...(process.env as Record<string, string>), HANGAR_DATA_DIR: dataDir, LOG_LEVEL: 'silent', HANGAR_BILLING_PLANS_FILE: plansFile };
    delete env.DATABASE_URL;
    delete env.HANGAR_SECRET_KEY;
    if (testDatabaseUrl) env.DATABASE_URL = `${testDatabaseUrl}?schema=${schema}`;
  });
  afterAll(async () => {
    rmSync(dataDir, { recursive: true, force: true });
    if (testDatabaseUrl) {
      const client = new pg.Client({ connectionString: testDatabaseUrl });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.end();
    }
  });

  const run = (args: string[]) => spawnSync(process.execPath, [BIN, ...args], { env, encoding: 'utf8', timeout: 120_000 });

  it('lists the plans and puts an organization on one; an unknown plan is refused, changing nothing', () => {
    const init = run(['init', '--json']);
    expect(init.status, init.stderr).toBe(0);
    const { orgId } = JSON.parse(init.stdout);

    const list = run(['plans', 'list', '--json']);
    expect(list.status, list.stderr).toBe(0);
    expect(JSON.parse(list.stdout).map((p: { id: string }) => p.id)).toEqual(['free', 'team']);

    const bad = run(['plans', 'assign', '--org', orgId, '--plan', 'gold']);
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain('no plan "gold"');

    const assigned = run(['plans', 'assign', '--org', orgId, '--plan', 'team']);
    expect(assigned.status, assigned.stderr).toBe(0);
    expect(assigned.stdout.trim()).toBe(`${orgId}: plan free -> team`);

    const usage = run(['plans', 'assign', '--plan', 'team']);
    expect(usage.status).not.toBe(0);
    expect(usage.stderr).toContain('usage: hangar plans assign');
  }, 600_000);
});
