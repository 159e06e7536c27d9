import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import fs from 'node:fs/promises';
import { isIPv4, isIPv6 } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import type { BaseInfo } from './types.js';

const execFileP = promisify(execFile);

/**
 * The base layer of every sandbox: the host's own userland, read-only. This server cannot reach an Ubuntu
 * mirror, so instead of downloading an image it stacks a small generated root tree (a filtered copy of the
 * host's /etc, dpkg's database so apt knows what is installed, the usual empty folders and the usr-merge
 * symlinks) over the host's /usr, which is used in place as the bottom overlay layer. ADR 0010 has the why.
 *
 * The tree is keyed by a fingerprint of the host's OS release and package database, so a host upgrade
 * makes a new one while running sandboxes keep theirs.
 */

/** Host /etc entries never copied: credentials, host identity, and services' configs that may hold passwords. */
const ETC_DENY = [
  'shadow',
  'shadow-',
  'gshadow',
  'gshadow-',
  'sudoers',
  'sudoers.d',
  'ssl/private',
  'security/opasswd',
  'machine-id',
  'hostname',
  'hosts',
  'resolv.conf',
  'mtab',
  'subuid',
  'subgid',
  'subuid-',
  'subgid-',
  'postgresql',
  'postgresql-common',
  'redis',
  'mysql',
  'rabbitmq',
  'mosquitto',
  'nats-server',
  'hangar',
  'docker',
  'containerd',
  'netns',
  'cron.d',
  'crontab',
  'apt/auth.conf',
  'apt/auth.conf.d',
];

export function hostOs(osRelease: string): BaseInfo {
  const field = (k: string) => osRelease.match(new RegExp(`^${k}="?([^"\\n]*)"?$`, 'm'))?.[1] ?? '';
  const id = field('ID') || 'linux';
  const version = field('VERSION_ID');
  const osName = field('PRETTY_NAME') || `${id} ${version}`.trim();
  return {
    os: version ? `${id}-${version}` : id,
    osName,
    description: `${osName}: this server's own userland (/usr, used read-only in place) under a generated /etc; sandboxes and builds add writable layers on top`,
  };
}

/** Debian's empty /usr/local, shown in place of the host's (its own tools and their configuration stay out of sight). */
const USR_LOCAL = ['bin', 'etc', 'games', 'include', 'lib', 'sbin', 'share/man', 'src'];

/**
 * `root`: the generated root tree. `usr`: the layers stacked right over the host's /usr, highest first: an empty
 * /usr/local skeleton over a whiteout that hides the host's /usr/local (overlayfs stops looking below a whiteout).
 */
export async function ensureBaseLayer(dir: string): Promise<{ root: string; usr: string[]; info: BaseInfo }> {
  const osRelease = await fs.readFile('/etc/os-release', 'utf8').catch(() => fs.readFile('/usr/lib/os-release', 'utf8'));
  const dpkg = await fs.stat('/var/lib/dpkg/status').catch(() => null);
  const fingerprint = createHash('sha256')
    .update(osRelease)
    .update(String(dpkg?.mtimeMs ?? 0))
    .update(String(dpkg?.size ?? 0))
    .update('v2')
    .digest('hex')
    .slice(0, 16);
  const final = path.join(dir, 'base', fingerprint);
  const info = hostOs(osRelease);
  const layers = (base: string) => ({ root: path.join(base, 'root'), usr: [path.join(base, 'usr'), path.join(base, 'usr-hide')], info });
  if (await exists(path.join(final, '.complete'))) return layers(final);

  await fs.mkdir(path.join(dir, 'base'), { recursive: true, mode: 0o700 });
  const tmp = `${final}.tmp-${process.pid}-${Date.now()}`;
  const root = path.join(tmp, 'root');
  await fs.mkdir(root, { recursive: true, mode: 0o755 });
  for (const d of [
    'proc',
    'sys',
    'dev',
    'run',
    'home',
    'mnt',
    'opt',
    'srv',
    'media',
    'usr',
    'boot',
    'var/log',
    'var/lib/apt/lists/partial',
    'var/cache/apt/archives/partial',
    'var/cache/debconf',
    'var/spool',
    'var/mail',
    'var/opt',
    'var/local',
    '.hangar',
  ]) {
    await fs.mkdir(path.join(root, d), { recursive: true, mode: 0o755 });
  }
  for (const d of ['tmp', 'var/tmp']) {
    await fs.mkdir(path.join(root, d), { recursive: true });
    await fs.chmod(path.join(root, d), 0o1777);
  }
  await fs.mkdir(path.join(root, 'root'), { mode: 0o700 });
  await fs.writeFile(path.join(root, '.hangar', 'agent'), '', { mode: 0o755 });
  for (const link of ['bin', 'lib', 'lib32', 'lib64', 'libx32', 'sbin']) {
    const target = await fs.readlink(`/${link}`).catch(() => null);
    if (target) await fs.symlink(target, path.join(root, link));
    else if (await exists(`/${link}`))
      throw new Error(`/${link} is a real folder: the host is not usr-merged, so its userland cannot be the base layer`);
  }
  await fs.symlink('../run', path.join(root, 'var/run'));
  await fs.symlink('../run/lock', path.join(root, 'var/lock'));

  // /etc: a copy of the host's, minus the denied entries and anything not world-readable (secrets).
  await execFileP('cp', ['-a', '/etc/.', path.join(root, 'etc')]);
  for (const entry of ETC_DENY) await fs.rm(path.join(root, 'etc', entry), { recursive: true, force: true });
  await removeUnreadable(path.join(root, 'etc'));
  for (const f of await fs.readdir(path.join(root, 'etc/ssh')).catch(() => [] as string[])) {
    if (f.startsWith('ssh_host_')) await fs.rm(path.join(root, 'etc/ssh', f), { force: true });
  }
  await fs.writeFile(path.join(root, 'etc/passwd'), systemEntries(await fs.readFile('/etc/passwd', 'utf8')));
  await fs.writeFile(path.join(root, 'etc/group'), systemEntries(await fs.readFile('/etc/group', 'utf8')));
  await fs.writeFile(path.join(root, 'etc/hostname'), 'sandbox\n');
  await fs.writeFile(path.join(root, 'etc/hosts'), '127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n');
  await fs.writeFile(path.join(root, 'etc/machine-id'), '');
  await fs.writeFile(path.join(root, 'etc/resolv.conf'), await resolvConf());
  await fs.symlink('../proc/self/mounts', path.join(root, 'etc/mtab'));
  // dpkg's database, so apt in a template build knows what the host userland already has.
  if (dpkg) await execFileP('cp', ['-a', '/var/lib/dpkg', path.join(root, 'var/lib/dpkg')]);

  for (const d of USR_LOCAL) await fs.mkdir(path.join(tmp, 'usr/local', d), { recursive: true, mode: 0o755 });
  await fs.symlink('share/man', path.join(tmp, 'usr/local/man'));
  await fs.mkdir(path.join(tmp, 'usr-hide'), { mode: 0o755 });
  await execFileP('mknod', ['-m', '000', path.join(tmp, 'usr-hide/local'), 'c', '0', '0']);

  await fs.writeFile(path.join(tmp, '.complete'), new Date().toISOString());
  try {
    await fs.rename(tmp, final);
  } catch {
    // Another process made it first: use theirs.
    await fs.rm(tmp, { recursive: true, force: true });
  }
  return layers(final);
}

/** passwd/group lines of system accounts (ids below 1000) and nobody/nogroup; host people are not copied. */
function systemEntries(text: string): string {
  const lines = text.split('\n').filter((line) => {
    const id = Number(line.split(':')[2]);
    return line && Number.isInteger(id) && (id < 1000 || id === 65534);
  });
  return `${lines.join('\n')}\n`;
}

async function resolvConf(): Promise<string> {
  const servers = nameservers(await fs.readFile('/etc/resolv.conf', 'utf8').catch(() => ''));
  return servers.map((s) => `nameserver ${s}`).join('\n') + (servers.length ? '\n' : '');
}

/** The resolvers of a resolv.conf a sandbox can use (loopback ones are the host's own and unreachable from it). */
export function nameservers(resolvConf: string): string[] {
  return resolvConf
    .split('\n')
    .map((l) => l.match(/^\s*nameserver\s+(\S+)/)?.[1])
    .filter((s): s is string => !!s && !s.startsWith('127.') && s !== '::1' && (isIPv4(s) || isIPv6(s)));
}

async function removeUnreadable(dir: string): Promise<void> {
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    const st = await fs.lstat(p);
    if (st.isSymbolicLink()) continue;
    if (!(st.mode & constants.S_IROTH)) {
      await fs.rm(p, { recursive: true, force: true });
      continue;
    }
    if (entry.isDirectory()) await removeUnreadable(p);
  }
}

async function exists(p: string): Promise<boolean> {
  return fs.access(p).then(
    () => true,
    () => false,
  );
}
