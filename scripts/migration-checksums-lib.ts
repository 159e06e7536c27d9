// The committed checksums of migration files, which keep migrations append-only: a database records a migration
// as applied by name, so a file changed after it landed never runs again where it already ran. The checksums of
// the migrations up to the frozen registry are in migrations/checksums.json (never edited again); each later one has
// its own file, migrations/checksums/<file>.sha256, written once when it is added (ADR 0034), so adding a
// migration edits no landed file. Used by test/migrations.test.ts and `npm run migrations:checksums`.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { MIGRATION_FILE, migrationsDir } from '../src/platform/db/migrate.js';

export { MIGRATION_FILE, migrationsDir };
export const checksumsFile = path.join(migrationsDir, 'checksums.json');
export const checksumsDir = path.join(migrationsDir, 'checksums');

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

/** Every recorded checksum: the frozen list and the per-file ones. */
export function readChecksums(): Record<string, string> {
  const listed = existsSync(checksumsFile) ? (JSON.parse(readFileSync(checksumsFile, 'utf8')) as Record<string, string>) : {};
  if (existsSync(checksumsDir)) {
    for (const f of readdirSync(checksumsDir).filter((n) => n.endsWith('.sha256'))) {
      listed[f.slice(0, -'.sha256'.length)] = readFileSync(path.join(checksumsDir, f), 'utf8').trim();
    }
  }
  return listed;
}

/** Records a new migration's checksum in a file of its own. */
export function recordChecksum(file: string): void {
  mkdirSync(checksumsDir, { recursive: true });
  writeFileSync(path.join(checksumsDir, `${file}.sha256`), `${sha256(file)}\n`);
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
      'Restore the file and add a new migration (migrations/<yyyymmdd>T<hhmm>_<what>.ts) instead of editing.',
    );
  }
  if (p.unlisted.length) {
    lines.push(
      `No recorded checksum: ${p.unlisted.map((f) => `migrations/${f}`).join(', ')}.`,
      'Record new migration files with `npm run migrations:checksums` (migrations/checksums/<file>.sha256).',
    );
  }
  return lines.join('\n');
}
