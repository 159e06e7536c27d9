import { randomBytes, randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * Sandbox uids (`base` .. `base + count - 1`), one per live work directory, unique across every process on
 * the host: two Hangar processes (replicas, test workers) must never run sandboxes as the same uid.
 *
 * A uid is claimed by hard-linking a file naming its owner ("<pid> <starttime> <workdir>") to
 * `<lockDir>/<uid>.lock`; link(2) fails if the name exists, so exactly one claimant wins. A lock whose owner
 * process is gone (pid dead, or reused: the start time differs) is stale: it is taken over by renaming it
 * away (only one renamer succeeds), the dead owner's work directory is removed, and the uid is claimed anew.
 * The lock directory lives under /run by default, which is emptied at boot.
 */
export class UidSlots {
  private readonly held = new Set<number>();
  private readonly me = `${process.pid} ${startTimeOf(process.pid)}`;

  constructor(
    private readonly lockDir: string,
    private readonly base: number,
    private readonly count: number,
    /** Removes a dead owner's work directory (unmounts its tmpfs). */
    private readonly removeStaleDir: (dir: string) => Promise<void>,
  ) {}

  async init(): Promise<void> {
    await fs.mkdir(this.lockDir, { recursive: true, mode: 0o700 });
  }

  /** Claims a free uid for `dirOf(uid)`; throws when all are taken. */
  async claim(dirOf: (uid: number) => string): Promise<number> {
    const start = randomInt(this.count); // spread claimants so they rarely contend for the same lock
    for (let i = 0; i < this.count; i++) {
      const uid = this.base + ((start + i) % this.count);
      if (this.held.has(uid)) continue;
      if (await this.tryClaim(uid, dirOf(uid))) {
        this.held.add(uid);
        return uid;
      }
    }
    throw new Error(`all ${this.count} sandbox uids (${this.base}..${this.base + this.count - 1}) are in use`);
  }

  async release(uid: number): Promise<void> {
    if (!this.held.delete(uid)) return;
    await fs.rm(this.lockPath(uid), { force: true });
  }

  /** Takes over every stale lock (and removes its work dir): what a crashed process left behind. */
  async sweep(): Promise<number> {
    let swept = 0;
    for (const name of await fs.readdir(this.lockDir).catch(() => [] as string[])) {
      const m = /^(\d+)\.lock$/.exec(name);
      if (!m) continue;
      const uid = Number(m[1]);
      const owner = await fs.readFile(this.lockPath(uid), 'utf8').catch(() => null);
      if (owner !== null && !ownerAlive(owner, this.me) && (await this.takeOver(uid, owner))) {
        await fs.rm(this.lockPath(uid), { force: true });
        swept++;
      }
    }
    return swept;
  }

  private lockPath(uid: number): string {
    return path.join(this.lockDir, `${uid}.lock`);
  }

  private async tryClaim(uid: number, dir: string): Promise<boolean> {
    const lock = this.lockPath(uid);
    const tmp = path.join(this.lockDir, `.${uid}.${process.pid}.${randomBytes(4).toString('hex')}`);
    await fs.writeFile(tmp, `${this.me} ${dir}\n`, { mode: 0o600 });
    try {
      for (let attempt = 0; attempt < 2; attempt++) {
        try {
          await fs.link(tmp, lock);
          return true;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        }
        const owner = await fs.readFile(lock, 'utf8').catch(() => null);
        if (owner === null) continue; // released meanwhile: try again
        if (ownerAlive(owner, this.me)) return false;
        if (!(await this.takeOver(uid, owner))) return false;
      }
      return false;
    } finally {
      await fs.rm(tmp, { force: true });
    }
  }

  /** Moves a stale lock out of the way and cleans up after its owner. False if someone else got there first. */
  private async takeOver(uid: number, owner: string): Promise<boolean> {
    const lock = this.lockPath(uid);
    const grave = `${lock}.stale.${process.pid}.${randomBytes(4).toString('hex')}`;
    try {
      await fs.rename(lock, grave);
    } catch {
      return false;
    }
    const moved = await fs.readFile(grave, 'utf8').catch(() => null);
    if (moved !== owner) {
      // Between our read and the rename a live process claimed the uid: put its lock back.
      await fs.link(grave, lock).catch(() => undefined);
      await fs.rm(grave, { force: true });
      return false;
    }
    const dir = owner.trim().split(' ').slice(2).join(' ');
    if (dir) await this.removeStaleDir(dir).catch(() => undefined);
    await fs.rm(grave, { force: true });
    return true;
  }
}

/** Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat), or null when it is gone. */
export function startTimeOf(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

function ownerAlive(owner: string, me: string): boolean {
  const [pid, start] = owner.trim().split(' ');
  if (`${pid} ${start}` === me) return true;
  const n = Number(pid);
  return Number.isInteger(n) && n > 0 && startTimeOf(n) === start;
}
