/**
 * Which cgroup hierarchy this host gives Hangar, and Hangar's own subtree in it (docs/adr/0020-cgroup-v2.md).
 *
 * cgroup v2 (unified hierarchy: `<mount>/cgroup.controllers` exists): Hangar's subtree is `<own>/<parent>`, where
 * `<own>` is the cgroup the Hangar process sits in (from /proc/self/cgroup; the hierarchy's root, a systemd
 * service's cgroup with Delegate=yes, or a container's cgroup namespace root). To give its subtree memory, pids and
 * cpu, Hangar
 *   1. enables them on the path down to `<own>` where they are missing (the only writes outside its subtree),
 *   2. if `<own>` is not the real root and holds processes (the "no internal processes" rule forbids enabling
 *      controllers for children then), moves those processes (itself, and what its unit started) into the leaf
 *      `<own>/hangar-service`,
 *   3. enables them in `<own>/cgroup.subtree_control`, creates `<own>/<parent>` and enables them there too.
 * One-shot runs are `<subtree>/<launcher pid>-<start time>`; sandboxes (runc) `<subtree>/sandboxes/<install>/<id>`.
 * With `nsdelegate`, a cgroup namespace's root is a delegation boundary: Hangar then never looks above its own
 * namespace's root (it cannot see it) and moves processes only within it.
 *
 * cgroup v1: the controllers memory, pids, cpu, cpuacct and freezer mounted under `<mount>/<controller>`; runs are
 * `<mount>/<controller>/<parent>/<run>`, sandboxes `<mount>/<controller>/hangar-sandboxes/<install>/<id>`.
 */
import fs from 'node:fs/promises';
import path from 'node:path';

export interface CgroupInfo {
  version: 'v1' | 'v2';
  /** Where the hierarchy is mounted (default /sys/fs/cgroup). */
  mount: string;
  /** What the launcher gets as --cgroup-root: v1 the mount, v2 the absolute directory of Hangar's own cgroup. */
  launcherRoot: string;
  /** The subtree's name below launcherRoot (--cgroup-parent). */
  parent: string;
  /** v2: Hangar's subtree relative to the mount (e.g. `/hangar`, `/system.slice/hangar.service/hangar`); v1: null. */
  subtree: string | null;
  /** v2: the leaf Hangar moved its cgroup's processes into (relative to the mount), or null when none was needed. */
  serviceLeaf: string | null;
  /** v2: the hierarchy is mounted with nsdelegate. */
  nsdelegate: boolean;
}

export class CgroupUnavailable extends Error {}

/** The controllers every run and sandbox is limited by. */
export const V2_CONTROLLERS = ['memory', 'pids', 'cpu'] as const;
const V1_CONTROLLERS = ['memory', 'pids', 'cpu', 'cpuacct', 'freezer'];
/** The leaf the processes of Hangar's own cgroup move into on v2 (when that cgroup is not the root). */
export const SERVICE_LEAF = 'hangar-service';

const probes = new Map<string, Promise<CgroupInfo>>();

/** Detects the hierarchy and (v2) sets Hangar's subtree up, once per process and (mount, parent). */
export function cgroupSetup(mount = '/sys/fs/cgroup', parent = 'hangar'): Promise<CgroupInfo> {
  const key = `${mount}\0${parent}`;
  let p = probes.get(key);
  if (!p) {
    p = detect(mount, parent);
    // A failure is not cached: the operator may fix the host (e.g. delegate controllers) and retry.
    p.catch(() => probes.delete(key));
    probes.set(key, p);
  }
  return p;
}

async function detect(mount: string, parent: string): Promise<CgroupInfo> {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(parent)) throw new CgroupUnavailable(`bad cgroup parent name ${JSON.stringify(parent)}`);
  if (await exists(path.join(mount, 'cgroup.controllers'))) return setupV2(mount, parent);
  const missing: string[] = [];
  for (const c of V1_CONTROLLERS) {
    if (!(await writable(path.join(mount, c, 'cgroup.procs')))) missing.push(c);
  }
  if (missing.length > 0) {
    throw new CgroupUnavailable(
      `${mount} is neither a cgroup v2 (unified) hierarchy nor has the cgroup v1 controllers Hangar needs ` +
        `(not mounted writable: ${missing.map((c) => path.join(mount, c)).join(', ')})`,
    );
  }
  return { version: 'v1', mount, launcherRoot: mount, parent, subtree: null, serviceLeaf: null, nsdelegate: false };
}

async function setupV2(mount: string, parent: string): Promise<CgroupInfo> {
  const line = (await fs.readFile('/proc/self/cgroup', 'utf8')).split('\n').find((l) => l.startsWith('0::'));
  if (!line) throw new CgroupUnavailable(`${mount} is a cgroup v2 hierarchy but this process is in none (no 0:: line in /proc/self/cgroup)`);
  let own = line.slice(3).trim() || '/';
  // Already moved into the leaf by an earlier set-up in this process (or by a parent process of ours).
  if (path.posix.basename(own) === SERVICE_LEAF) own = path.posix.dirname(own);
  const ownDir = path.join(mount, own);
  // The real root has no cgroup.type; a cgroup namespace's root (a container) does, and follows every rule.
  const isRealRoot = own === '/' && !(await exists(path.join(ownDir, 'cgroup.type')));
  const nsdelegate = await mountedWithNsdelegate(mount);

  // 1. The controllers must reach Hangar's own cgroup: enable them on the path down where the parent allows.
  let available = await controllers(path.join(ownDir, 'cgroup.controllers'));
  if (!V2_CONTROLLERS.every((c) => available.has(c)) && own !== '/') {
    const parts = own.split('/').filter(Boolean);
    for (let i = 0; i < parts.length; i++) {
      const dir = path.join(mount, ...parts.slice(0, i));
      const have = await controllers(path.join(dir, 'cgroup.controllers'));
      const on = await controllers(path.join(dir, 'cgroup.subtree_control'));
      const add = V2_CONTROLLERS.filter((c) => have.has(c) && !on.has(c));
      if (add.length > 0) await fs.writeFile(path.join(dir, 'cgroup.subtree_control'), add.map((c) => `+${c}`).join(' ')).catch(() => undefined);
    }
    available = await controllers(path.join(ownDir, 'cgroup.controllers'));
  }
  const unavailable = V2_CONTROLLERS.filter((c) => !available.has(c));
  if (unavailable.length > 0) {
    throw new CgroupUnavailable(
      `the cgroup v2 controller(s) ${unavailable.join(', ')} are not available to Hangar's cgroup ${ownDir} ` +
        '(not enabled in its parent’s cgroup.subtree_control); under systemd run Hangar as a service with Delegate=yes',
    );
  }

  // 2. No internal processes: a non-root cgroup that hands controllers to children holds no processes itself.
  let serviceLeaf: string | null = null;
  const enabled = await controllers(path.join(ownDir, 'cgroup.subtree_control'));
  if (!isRealRoot && !V2_CONTROLLERS.every((c) => enabled.has(c))) {
    const pids = await procs(ownDir);
    if (pids.length > 0) {
      const leaf = path.join(ownDir, SERVICE_LEAF);
      await fs.mkdir(leaf, { recursive: true });
      for (const pid of pids) {
        await fs.writeFile(path.join(leaf, 'cgroup.procs'), String(pid)).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== 'ESRCH') throw new CgroupUnavailable(`cannot move process ${pid} into ${leaf}: ${err.message}`);
        });
      }
      serviceLeaf = path.posix.join(own, SERVICE_LEAF);
    }
  } else if (!isRealRoot && (await exists(path.join(ownDir, SERVICE_LEAF)))) {
    serviceLeaf = path.posix.join(own, SERVICE_LEAF);
  }

  // 3. Hangar's subtree, with the controllers enabled for its children (runs and sandboxes).
  await enable(ownDir);
  const subtreeDir = path.join(ownDir, parent);
  await fs.mkdir(subtreeDir, { recursive: true });
  await enable(subtreeDir);
  return {
    version: 'v2',
    mount,
    launcherRoot: ownDir,
    parent,
    subtree: path.posix.join(own, parent),
    serviceLeaf,
    nsdelegate,
  };
}

/** Enables memory, pids and cpu in dir/cgroup.subtree_control (those not enabled yet). */
async function enable(dir: string): Promise<void> {
  const on = await controllers(path.join(dir, 'cgroup.subtree_control'));
  const add = V2_CONTROLLERS.filter((c) => !on.has(c));
  if (add.length === 0) return;
  await fs.writeFile(path.join(dir, 'cgroup.subtree_control'), add.map((c) => `+${c}`).join(' ')).catch((err: NodeJS.ErrnoException) => {
    const why = err.code === 'EBUSY' ? ' (it holds processes: the "no internal processes" rule)' : '';
    throw new CgroupUnavailable(`cannot enable ${add.join(', ')} in ${path.join(dir, 'cgroup.subtree_control')}: ${err.message}${why}`);
  });
}

async function controllers(file: string): Promise<Set<string>> {
  const text = await fs.readFile(file, 'utf8').catch(() => '');
  return new Set(text.split(/\s+/).filter(Boolean));
}

async function procs(dir: string): Promise<number[]> {
  const text = await fs.readFile(path.join(dir, 'cgroup.procs'), 'utf8').catch(() => '');
  return text
    .split('\n')
    .map((l) => Number(l.trim()))
    .filter((n) => Number.isInteger(n) && n > 0);
}

async function mountedWithNsdelegate(mount: string): Promise<boolean> {
  const info = await fs.readFile('/proc/self/mountinfo', 'utf8').catch(() => '');
  for (const l of info.split('\n')) {
    const [pre, post] = l.split(' - ');
    if (!pre || !post) continue;
    const fields = pre.split(' ');
    const [fstype, , superOpts] = post.split(' ');
    if (fstype === 'cgroup2' && fields[4] === mount)
      return (superOpts ?? '').split(',').includes('nsdelegate') || (fields[5] ?? '').split(',').includes('nsdelegate');
  }
  return false;
}

async function exists(p: string): Promise<boolean> {
  return fs.access(p).then(
    () => true,
    () => false,
  );
}

async function writable(p: string): Promise<boolean> {
  return fs.access(p, fs.constants.W_OK).then(
    () => true,
    () => false,
  );
}
