// The committed checksum list of migration files (migrations/checksums.json: file name -> sha256), which
// keeps migrations append-only: a database records a migration as applied by name, so a file changed after
// it landed never runs again where it already ran. Used by test/migrations.test.ts and
// `npm run migrations:checksums`.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const migrationsDir = fileURLToPath(new URL('../migrations/', import.meta.url));
export const checksumsFile = fileURLToPath(new URL('../migrations/checksums.json', import.meta.url));

/** A migration's file name: `<yyyymmdd>T<hhmm>_<what>.ts` (index.ts and checksums.json are not migrations). */
export const MIGRATION_FILE = /^\d{8}T\d{4}_[a-z0-9_]+\.ts$/;

export function migrationFiles(): string[] {
  return readdirSync(migrationsDir)
    .filter((f) => MIGRATION_FILE.test(f))
    .sort();
}

export function sha256(file: string): string {
  return createHash('sha256')
    .update(readFileSync(path.join(migrationsDir, file)))
    .digest('hex');
}

export function readChecksums(): Record<string, string> {
  return existsSync(checksumsFile) ? (JSON.parse(readFileSync(checksumsFile, 'utf8')) as Record<string, string>) : {};
}

export interface ChecksumProblems {
  /** Listed files whose content is no longer what landed. */
  changed: string[];
  /** Listed files that are gone. */
  removed: string[];
  /** Migration files the list lacks. */
  unlisted: string[];
}

export function checkChecksums(): ChecksumProblems {
  const listed = readChecksums();
  const files = migrationFiles();
  return {
    changed: Object.keys(listed).filter((f) => files.includes(f) && sha256(f) !== listed[f]),
    removed: Object.keys(listed).filter((f) => !files.includes(f)),
    unlisted: files.filter((f) => !(f in listed)),
  };
}

/** What to tell whoever broke the rule; empty when nothing is wrong. */
export function describeProblems(p: ChecksumProblems): string {
  const lines: string[] = [];
  for (const f of p.changed) lines.push(`migrations/${f} changed after it landed.`);
  for (const f of p.removed) lines.push(`migrations/${f} was removed after it landed.`);
  if (p.changed.length || p.removed.length) {
    lines.push(
      'Migrations are append-only: a database that already ran a migration never runs it again, so an edit reaches only new databases.',
      'Restore the file and add a new migration (migrations/<yyyymmdd>T<hhmm>_<what>.ts, listed in migrations/index.ts) instead of editing.',
    );
  }
  if (p.unlisted.length) {
    lines.push(
      `Not in migrations/checksums.json: ${p.unlisted.map((f) => `migrations/${f}`).join(', ')}.`,
      'Add new migration files to the list with `npm run migrations:checksums`.',
    );
  }
  return lines.join('\n');
}
