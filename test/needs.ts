import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import { describe, it, type TestFunction } from 'vitest';

/**
 * Suites that need something of the host (the isolation layer, a language toolchain, Redis). On a developer's
 * machine without it they are skipped; on CI (`CI` set, as .ci/run does) the machine is set up to have all of
 * it, so a missing capability fails, naming what is missing, instead of silently shrinking the suite.
 */
export interface Need {
  /** What is needed, as a person would name it: "the isolation layer (bubblewrap, cgroups, root)". */
  what: string;
  present: boolean;
  /** Why it is missing, when known (e.g. the isolation layer's own reason). */
  reason?: string | null;
  /** Whether CI must have it; default true. False where a CI pass legitimately lacks it. */
  requiredOnCi?: boolean;
  /** How CI gets it; default: run scripts/setup.sh as root. */
  fix?: string;
}

export const onCi = Boolean(process.env.CI) && process.env.CI !== 'false' && process.env.CI !== '0';

export type Verdict = 'run' | 'skip' | 'fail';

/** What becomes of a suite that needs `need`, on CI or not. */
export function verdict(need: Need, ci = onCi): Verdict {
  if (need.present) return 'run';
  return ci && need.requiredOnCi !== false ? 'fail' : 'skip';
}

function failure(need: Need): Error {
  return new Error(
    `${need.what} is missing${need.reason ? ` (${need.reason})` : ''}. CI (CI=${process.env.CI}) must have it: ` +
      `the suite fails here instead of being skipped. On the CI machine: ${need.fix ?? 'run scripts/setup.sh as root'}.`,
  );
}

/** `describe` for a suite that needs `need`: runs where present; skipped on a developer's machine; one failing test on CI. */
export function describeNeeding(need: Need, name: string, fn: () => void): void {
  const v = verdict(need);
  if (v === 'run') describe(name, fn);
  else if (v === 'skip') describe.skip(name, fn);
  else
    describe(name, () => {
      it(`needs ${need.what}`, () => {
        throw failure(need);
      });
    });
}

/** `it` for a test that needs `need`: runs where present; skipped on a developer's machine; fails on CI. */
export function itNeeding(need: Need, name: string, fn: TestFunction, timeout?: number): void {
  const v = verdict(need);
  if (v === 'run') it(name, fn, timeout);
  else if (v === 'skip') it.skip(name, fn);
  else
    it(name, () => {
      throw failure(need);
    });
}

/** The isolation layer of POST /v1/execute (bubblewrap, cgroups, the native helpers, root). */
export function isolationNeed(iso: { available: boolean; unavailableReason: string | null }): Need {
  return { what: 'the isolation layer (root, bubblewrap, cgroups, the native helpers)', present: iso.available, reason: iso.unavailableReason };
}

/** A language's toolchain, which scripts/setup.sh installs. */
export function toolchainNeed(language: string, toolchains: readonly unknown[] | undefined): Need {
  return { what: `the ${language} toolchain (installed by scripts/setup.sh)`, present: (toolchains?.length ?? 0) > 0 };
}

/** Whether `command` is an executable file in one of PATH's directories. */
function onPath(command: string): boolean {
  return (process.env.PATH ?? '').split(path.delimiter).some((dir) => {
    if (!dir) return false;
    try {
      accessSync(path.join(dir, command), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/** WireGuard's wg-quick (Debian's wireguard-tools, which scripts/setup.sh installs): checks generated mesh configs. */
export function wireguardNeed(): Need {
  return { what: 'wg-quick (wireguard-tools, installed by scripts/setup.sh)', present: onPath('wg-quick') };
}

/** PostgreSQL at `pgUrl`, probed once: a query given two seconds (for suites that need PostgreSQL but not Redis). */
export async function postgresNeed(pgUrl: string, what = `PostgreSQL (${pgUrl})`): Promise<Need> {
  const fix = 'start PostgreSQL on 127.0.0.1 (scripts/setup.sh), or point HANGAR_TEST_DATABASE_URL at it';
  try {
    await probePostgres(pgUrl);
    return { what, present: true, fix };
  } catch (err) {
    return { what, present: false, reason: (err as Error).message, fix };
  }
}

async function probePostgres(pgUrl: string): Promise<void> {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: pgUrl, connectionTimeoutMillis: 2000 });
  await client.connect();
  await client.query('SELECT 1').finally(() => client.end());
}

/**
 * PostgreSQL and Redis, which replicas share (tests that run two Hangar nodes). Probed once: a query on the
 * database and a PING on Redis, each given two seconds.
 */
export async function replicaNeed(pgUrl: string, redisUrl: string): Promise<Need> {
  const what = `PostgreSQL (${pgUrl}) and Redis (${redisUrl}), which replicas share`;
  const fix = 'start PostgreSQL and Redis on 127.0.0.1 (scripts/setup.sh), or point HANGAR_TEST_DATABASE_URL / HANGAR_TEST_REDIS_URL at them';
  try {
    await probePostgres(pgUrl);
    const { createConnection } = await import('node:net');
    const url = new URL(redisUrl);
    await new Promise<void>((resolve, reject) => {
      const socket = createConnection({ host: url.hostname, port: Number(url.port || 6379) });
      const timer = setTimeout(() => socket.destroy(new Error('no answer within 2 s')), 2000);
      socket.once('connect', () => socket.write('PING\r\n'));
      socket.once('data', (d) => {
        clearTimeout(timer);
        socket.end();
        if (d.toString().startsWith('+PONG')) resolve();
        else reject(new Error(`Redis answered ${JSON.stringify(d.toString().slice(0, 40))}`));
      });
      socket.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
    });
    return { what, present: true, fix };
  } catch (err) {
    return { what, present: false, reason: (err as Error).message, fix };
  }
}
