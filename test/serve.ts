import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { testDatabaseUrl } from './harness.js';

/** Resolves with the URL a `hangar serve` child prints once it listens; rejects if it exits or takes too long. */
export function listeningUrl(child: ChildProcess, timeoutMs = 30_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`server did not start: ${out}${err}`)), timeoutMs);
    child.stderr!.on('data', (d) => (err += d));
    child.stdout!.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited ${code}: ${err}`));
    });
  });
}

/**
 * The environment of a `hangar` CLI process of a test: a data directory of its own, silent logs, and on PostgreSQL a
 * schema of its own; `cleanup()` removes both.
 */
export function cliEnvironment(name: string): { env: Record<string, string>; dataDir: string; cleanup(): Promise<void> } {
  const dataDir = mkdtempSync(path.join(tmpdir(), `hangar-${name}-`));
  const schema = `${name.replace(/\W/g, '_')}_${randomBytes(5).toString('hex')}`;
  const env: Record<string, string> = { ...(process.env as Record<string, string>), HANGAR_DATA_DIR: dataDir, LOG_LEVEL: 'silent' };
  delete env.DATABASE_URL;
  delete env.HANGAR_SECRET_KEY;
  if (testDatabaseUrl) env.DATABASE_URL = `${testDatabaseUrl}?schema=${schema}`;
  return {
    env,
    dataDir,
    async cleanup() {
      rmSync(dataDir, { recursive: true, force: true });
      if (!testDatabaseUrl) return;
      const client = new pg.Client({ connectionString: testDatabaseUrl });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.end();
    },
  };
}
