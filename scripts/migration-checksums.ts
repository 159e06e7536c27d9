// Adds new migration files to migrations/checksums.json: `npm run migrations:checksums`. It never rewrites
// the checksum of a file already listed: a listed file that changed is an error to fix, not to record.
import { writeFileSync } from 'node:fs';
import { checkChecksums, checksumsFile, describeProblems, migrationFiles, readChecksums, sha256 } from './migration-checksums-lib.js';

const problems = checkChecksums();
if (problems.changed.length || problems.removed.length) {
  console.error(describeProblems({ ...problems, unlisted: [] }));
  process.exit(1);
}
const listed = readChecksums();
const next: Record<string, string> = {};
for (const f of migrationFiles()) next[f] = listed[f] ?? sha256(f);
writeFileSync(checksumsFile, `${JSON.stringify(next, null, 2)}\n`);
console.log(problems.unlisted.length ? `migrations/checksums.json: added ${problems.unlisted.join(', ')}` : 'migrations/checksums.json: up to date');
