// Records the checksums of new migration files, each in migrations/checksums/<file>.sha256:
// `npm run migrations:checksums`. It never rewrites a recorded checksum: a recorded file that changed is an error
// to fix, not to record.
import { checkChecksums, describeProblems, recordChecksum } from './migration-checksums-lib.js';

const problems = checkChecksums();
if (problems.changed.length || problems.removed.length) {
  console.error(describeProblems({ ...problems, unlisted: [] }));
  process.exit(1);
}
for (const f of problems.unlisted) recordChecksum(f);
console.log(problems.unlisted.length ? `migrations/checksums/: recorded ${problems.unlisted.join(', ')}` : 'migration checksums: up to date');
