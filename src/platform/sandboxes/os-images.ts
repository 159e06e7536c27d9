import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { gunzipSync } from 'node:zlib';
import type { Logger } from 'pino';
import { ALPINE_KEY_SHA256, ALPINE_KEYS_DIR, type ApkKeys, ApkVerifyError, fetchApkStatic, loadApkKeys, MirrorError } from './apk.js';
import type { OsImage, OsImageStore } from './types.js';

/**
 * OS images: the bottom layer of templates that name an `os` (ADR 0022). An image is a root filesystem built
 * by the server, with the distribution's own tool and signature checks, from the mirror the operator
 * configured: mmdebstrap for Debian and Ubuntu (apt verifies the mirror's Release file against the archive
 * keyring), apk.static for Alpine (itself taken from the mirror only once the signed index and its own signed
 * package check out against the Alpine keys shipped in ./alpine-keys, see apk.ts; apk then verifies every package
 * with the same keys). A tenant only chooses which os; nothing of a template's request reaches the image build.
 *
 * Layout: `<dir>/images/<os>-<mirror hash>/<generation>/{root,usr}` (the same root + /usr split as every
 * layer), shared by every template of that os on the node and by every installation using the folder. A
 * generation is complete once its `.complete` file exists; it is made in a temporary folder and renamed into
 * place, under a lock (flock) so concurrent builds of the same image build it once. New builds use the newest
 * generation; a file `REBUILD` in `<dir>/images/<os>-<mirror hash>/` makes the next build of that os build a
 * new generation (templates built on an older one keep using theirs).
 */

export type OsFamily = 'debian' | 'ubuntu' | 'alpine';

export interface OsDefinition {
  family: OsFamily;
  /** Debian or Ubuntu suite, Alpine branch. */
  release: string;
  /** What /etc/os-release's PRETTY_NAME says, roughly; shown in a template's `runs`. */
  name: string;
}

/** The operating systems a template can name (the spec's list). */
export const OS_DEFINITIONS: Readonly<Record<string, OsDefinition>> = Object.freeze({
  'ubuntu-22.04': { family: 'ubuntu', release: 'jammy', name: 'Ubuntu 22.04 LTS (jammy)' },
  'ubuntu-24.04': { family: 'ubuntu', release: 'noble', name: 'Ubuntu 24.04 LTS (noble)' },
  'debian-12': { family: 'debian', release: 'bookworm', name: 'Debian GNU/Linux 12 (bookworm)' },
  'alpine-3.19': { family: 'alpine', release: 'v3.19', name: 'Alpine Linux 3.19' },
});
export const KNOWN_OS = Object.keys(OS_DEFINITIONS);

export interface Mirrors {
  debian: string;
  debianSecurity: string;
  ubuntu: string;
  alpine: string;
  /** The OpenPGP keyring apt checks Ubuntu's archive against (Debian does not ship Ubuntu's keys). */
  ubuntuKeyring: string;
}

export const DEBIAN_KEYRING = '/usr/share/keyrings/debian-archive-keyring.gpg';

/**
 * The Ubuntu archive's signing keys (Ubuntu Archive Automatic Signing Key 2018 and 2012, ftpmaster@ubuntu.com), by
 * fingerprint: the trust anchor when the server has no Ubuntu keyring of its own. The keyring is then taken from the
 * mirror's ubuntu-keyring package and only keys with these fingerprints are kept.
 */
export const UBUNTU_ARCHIVE_KEYS = ['F6ECB3762474EDA9D21B7022871920D1991BC93C', '790BC7277767219C42C86F933B4FE6ACC0B21F32'];

const execFileP = promisify(execFile);

/** The architecture Alpine images are built for (the only one sandboxes run on). */
const ALPINE_ARCH = 'x86_64';

/**
 * Where Debian keeps a machine's own certificate authorities (an operator's TLS-intercepting proxy, an internal
 * mirror or registry): the server's are added to every image, as the host base layer has them, so apt, npm and pip
 * inside builds trust what the server trusts.
 */
const LOCAL_CAS = '/usr/local/share/ca-certificates';

const PROBE_TTL_MS = 60_000;
const PROBE_TIMEOUT_MS = 4_000;
/** An image build (download + unpack of ~100 packages) must end within this. */
const BUILD_TIMEOUT_MS = 20 * 60_000;
const LOG_LINE_CHARS = 2000;

export class OsImages implements OsImageStore {
  private readonly probes = new Map<string, { at: number; reason: Promise<string | null> }>();
  private readonly building = new Map<string, Promise<OsImage>>();
  private alpineKeys: Promise<ApkKeys> | null = null;

  constructor(
    private readonly dir: string,
    private readonly mirrors: Mirrors,
    private readonly log: Logger,
  ) {}

  mirrorOf(os: string): string {
    const family = definition(os).family;
    return family === 'debian' ? this.mirrors.debian : family === 'ubuntu' ? this.mirrors.ubuntu : this.mirrors.alpine;
  }

  /**
   * `<os>-<hash of what the image is built from>`: its mirrors and the server's own certificate authorities
   * (LOCAL_CAS, added to every image), so a changed mirror or CA makes a new image.
   */
  private async keyOf(os: string): Promise<string> {
    const d = definition(os);
    const from = d.family === 'debian' ? [this.mirrors.debian, this.mirrors.debianSecurity] : [this.mirrorOf(os)];
    const hash = createHash('sha256').update(JSON.stringify(['v1', ...from]));
    for (const name of (await fs.readdir(LOCAL_CAS).catch(() => [] as string[])).filter((n) => n.endsWith('.crt')).sort()) {
      hash.update(name).update(await fs.readFile(path.join(LOCAL_CAS, name)).catch(() => Buffer.alloc(0)));
    }
    return `${os}-${hash.digest('hex').slice(0, 12)}`;
  }

  /** The file a probe fetches: the signed release file (Debian, Ubuntu) or the branch's index (Alpine). */
  private probeUrl(os: string): string {
    const d = definition(os);
    const mirror = this.mirrorOf(os).replace(/\/+$/, '');
    return d.family === 'alpine' ? `${mirror}/${d.release}/main/x86_64/APKINDEX.tar.gz` : `${mirror}/dists/${d.release}/InRelease`;
  }

  /**
   * Whether the os's mirror answers: null when it does, else why not (in words, naming the mirror and its
   * setting). A HEAD of the release file with a short timeout; the answer is kept for a minute.
   */
  probe(os: string): Promise<string | null> {
    const cached = this.probes.get(os);
    if (cached && Date.now() - cached.at < PROBE_TTL_MS) return cached.reason;
    const url = this.probeUrl(os);
    const reason = fetch(url, { method: 'HEAD', redirect: 'follow', signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) }).then(
      (res) => (res.ok ? null : `${url} answered HTTP ${res.status}`),
      (err: Error) => `${url} cannot be reached (${describeFetchError(err)})`,
    );
    this.probes.set(os, { at: Date.now(), reason });
    return reason;
  }

  async buildable(os: string): Promise<string | null> {
    const d = definition(os);
    if (d.family === 'alpine') {
      return this.trustedAlpineKeys().then(
        () => null,
        (err: Error) => `${os} images cannot be built on this server: ${err.message}`,
      );
    }
    const keyring = d.family === 'ubuntu' ? this.mirrors.ubuntuKeyring : DEBIAN_KEYRING;
    if (await nonEmptyFile(keyring)) return null;
    if (d.family === 'debian')
      return `${os} images cannot be built on this server: there is no Debian archive keyring at ${keyring} (package debian-archive-keyring)`;
    // No Ubuntu keyring installed: one is taken from the mirror and checked against the pinned fingerprints, with gpg.
    const tools = await Promise.all([execFileP('gpg', ['--version']), execFileP('dpkg-deb', ['--version'])]).then(
      () => true,
      () => false,
    );
    return tools
      ? null
      : `${os} images cannot be built on this server: there is no Ubuntu archive keyring at ${keyring} (package ubuntu-keyring, or HANGAR_UBUNTU_KEYRING) and no gpg and dpkg-deb to check the mirror's own against the archive's known key fingerprints`;
  }

  /**
   * The keyring apt checks Ubuntu's mirror with: the operator's (HANGAR_UBUNTU_KEYRING) when it exists, else one
   * made once from the mirror's ubuntu-keyring package, keeping only the keys whose fingerprints are pinned here
   * (UBUNTU_ARCHIVE_KEYS); a package without the 2018 key is refused.
   */
  private async ubuntuKeyring(os: string, log: (line: string) => Promise<void>): Promise<string> {
    if (await nonEmptyFile(this.mirrors.ubuntuKeyring)) return this.mirrors.ubuntuKeyring;
    const dir = path.join(this.dir, 'images', 'keyrings');
    const file = path.join(dir, 'ubuntu-archive.gpg');
    if (await nonEmptyFile(file)) return file;
    const mirror = this.mirrors.ubuntu.replace(/\/+$/, '');
    const release = definition(os).release;
    await log(
      `==> No Ubuntu keyring at ${this.mirrors.ubuntuKeyring}: taking the mirror's ubuntu-keyring package and keeping the archive keys with known fingerprints`,
    );
    const index = `${mirror}/dists/${release}/main/binary-amd64/Packages.gz`;
    const res = await fetch(index, { signal: AbortSignal.timeout(120_000) });
    if (!res.ok) throw new Error(`${index} answered HTTP ${res.status}`);
    const packages = gunzipSync(Buffer.from(await res.arrayBuffer()), { maxOutputLength: 256 * 1024 * 1024 }).toString('utf8');
    const stanza = packages.split('\n\n').find((st) => /^Package: ubuntu-keyring$/m.test(st));
    const filename = stanza?.match(/^Filename: (pool\/[A-Za-z0-9+._/-]+\.deb)$/m)?.[1];
    if (!filename) throw new Error(`the ${release} index of ${mirror} has no ubuntu-keyring package`);
    const deb = await fetch(`${mirror}/${filename}`, { signal: AbortSignal.timeout(120_000) });
    if (!deb.ok) throw new Error(`${mirror}/${filename} answered HTTP ${deb.status}`);
    // Readable by all: apt runs gpgv as its own unprivileged user (_apt).
    await fs.mkdir(dir, { recursive: true, mode: 0o755 });
    await fs.chmod(dir, 0o755);
    await fs.chmod(path.join(this.dir, 'images'), 0o711).catch(() => undefined);
    const work = await fs.mkdtemp(path.join(dir, '.tmp-'));
    try {
      await fs.writeFile(path.join(work, 'keyring.deb'), Buffer.from(await deb.arrayBuffer()));
      await fs.mkdir(path.join(work, 'gnupg'), { mode: 0o700 });
      await execFileP('sh', ['-ec', UBUNTU_KEYRING_SCRIPT, 'ubuntu-keyring', work, ...UBUNTU_ARCHIVE_KEYS]);
      const fprs = (await fs.readFile(path.join(work, 'fingerprints'), 'utf8')).split('\n').filter(Boolean);
      if (!fprs.includes(UBUNTU_ARCHIVE_KEYS[0]!)) {
        throw new Error(`the ubuntu-keyring package of ${mirror} does not hold the Ubuntu archive key ${UBUNTU_ARCHIVE_KEYS[0]}`);
      }
      await fs.chmod(path.join(work, 'pinned.gpg'), 0o644);
      await fs.rename(path.join(work, 'pinned.gpg'), file);
    } finally {
      await fs.rm(work, { recursive: true, force: true });
    }
    await log(`==> Ubuntu archive keyring ready: ${file}`);
    return file;
  }

  /** The Alpine keys Hangar ships, checked against their pinned digests (once; a failure is retried). */
  private trustedAlpineKeys(): Promise<ApkKeys> {
    this.alpineKeys ??= loadApkKeys(ALPINE_KEYS_DIR, ALPINE_KEY_SHA256).catch((err: Error) => {
      this.alpineKeys = null;
      throw err;
    });
    return this.alpineKeys;
  }

  /**
   * apk.static, written to `dest`: taken from the mirror's apk-tools-static package only once the signed index and
   * the package check out against the shipped keys (apk.ts). A download that fails reads as an unreachable mirror.
   */
  private async alpineTool(os: string, dest: string, log: (line: string) => Promise<void>): Promise<void> {
    const repository = `${this.mirrors.alpine.replace(/\/+$/, '')}/${definition(os).release}/main`;
    try {
      await fetchApkStatic(repository, ALPINE_ARCH, await this.trustedAlpineKeys(), dest, log);
    } catch (err) {
      if (err instanceof MirrorError) throw new Error(this.unreachable(os, err.message));
      if (err instanceof ApkVerifyError) {
        throw new Error(
          `the package mirror of ${os} failed verification against Alpine's signing keys: ${err.message}; the operator sets it with ${mirrorSetting(os)}`,
        );
      }
      throw err;
    }
  }

  /** A probe's failure as the message a template build ends with. */
  unreachable(os: string, reason: string): string {
    return `the package mirror of ${os} is unreachable from this server: ${reason}; the operator sets it with ${mirrorSetting(os)}`;
  }

  /** A built image by id (what a template recorded), or null when it is gone. */
  async find(id: string): Promise<OsImage | null> {
    if (!/^[a-z0-9.-]+-[0-9a-f]{12}\/[0-9TZ]+$/.test(id)) return null;
    const dir = path.join(this.dir, 'images', id);
    if (!(await exists(path.join(dir, '.complete')))) return null;
    return { id, os: id.slice(0, id.lastIndexOf('-', id.indexOf('/'))), root: path.join(dir, 'root'), usr: path.join(dir, 'usr') };
  }

  /**
   * The image new builds of `os` use: the newest complete generation, built now (once, whoever asks) when there
   * is none or a rebuild was asked for. `log` gets the build's output; an unreachable mirror fails fast.
   */
  ensure(os: string, log: (line: string) => Promise<void>, signal?: AbortSignal): Promise<OsImage> {
    const running = this.building.get(os);
    if (running) return running;
    const p = this.ensureLocked(os, log, signal).finally(() => this.building.delete(os));
    this.building.set(os, p);
    return p;
  }

  private async ensureLocked(os: string, log: (line: string) => Promise<void>, signal?: AbortSignal): Promise<OsImage> {
    const key = await this.keyOf(os);
    const base = path.join(this.dir, 'images', key);
    const ready = await this.newest(key);
    if (ready && !(await exists(path.join(base, 'REBUILD')))) return ready;
    const refused = await this.buildable(os);
    if (refused) throw new Error(refused);
    const reason = await this.probe(os);
    if (reason) {
      this.probes.delete(os);
      throw new Error(this.unreachable(os, reason));
    }
    const family = definition(os).family;
    const keyring = family === 'ubuntu' ? await this.ubuntuKeyring(os, log) : family === 'alpine' ? ALPINE_KEYS_DIR : DEBIAN_KEYRING;
    await fs.mkdir(base, { recursive: true, mode: 0o700 });
    await fs.chmod(path.join(this.dir, 'images'), 0o711).catch(() => undefined);
    await fs.chmod(base, 0o711);
    const generation = new Date()
      .toISOString()
      .replace(/[-:]/g, '')
      .replace(/\.\d+Z$/, 'Z');
    const tmp = path.join(base, `.tmp-${generation}-${process.pid}`);
    await log(`==> Building the ${os} image from ${this.mirrorOf(os)} (once per node; later builds reuse it)`);
    // Alpine's bootstrap tool, verified before it runs (as root, like mmdebstrap); removed after the build.
    const tool = family === 'alpine' ? path.join(base, `.apk.static-${generation}-${process.pid}`) : null;
    // flock: another process (another installation on this host) building the same image makes this wait, and
    // then use what it built.
    const script = buildScript(definition(os));
    const args = [
      '-w',
      String(BUILD_TIMEOUT_MS / 1000),
      path.join(base, '.lock'),
      'sh',
      '-ec',
      script,
      'build-os-image',
      tmp,
      path.join(base, generation),
      base,
      ...this.scriptArgs(os, keyring, tool),
    ];
    const started = Date.now();
    try {
      if (tool) await this.alpineTool(os, tool, log);
      await run('flock', args, log, signal);
    } finally {
      await fs.rm(tmp, { recursive: true, force: true }).catch(() => undefined);
      if (tool) await fs.rm(tool, { force: true }).catch(() => undefined);
    }
    const image = await this.newest(key);
    if (!image) throw new Error(`the ${os} image build ended without an image`);
    this.log.info({ os, image: image.id, seconds: (Date.now() - started) / 1000 }, 'OS image ready');
    await log(`==> The ${os} image is ready (${image.id})`);
    return image;
  }

  private scriptArgs(os: string, keyring: string, tool: string | null): string[] {
    const d = definition(os);
    const resolv = '/etc/resolv.conf';
    if (d.family === 'debian') {
      const m = this.mirrors.debian.replace(/\/+$/, '');
      const s = this.mirrors.debianSecurity.replace(/\/+$/, '');
      return [resolv, keyring, d.release, `deb ${m} ${d.release} main`, `deb ${m} ${d.release}-updates main`, `deb ${s} ${d.release}-security main`];
    }
    if (d.family === 'ubuntu') {
      const m = this.mirrors.ubuntu.replace(/\/+$/, '');
      const components = 'main universe';
      return [
        resolv,
        keyring,
        d.release,
        `deb ${m} ${d.release} ${components}`,
        `deb ${m} ${d.release}-updates ${components}`,
        `deb ${m} ${d.release}-security ${components}`,
      ];
    }
    return [resolv, keyring, d.release, tool!, this.mirrors.alpine.replace(/\/+$/, ''), ALPINE_ARCH];
  }

  private async newest(key: string): Promise<OsImage | null> {
    const names = await fs.readdir(path.join(this.dir, 'images', key)).catch(() => [] as string[]);
    for (const name of names
      .filter((n) => /^[0-9TZ]+$/.test(n))
      .sort()
      .reverse()) {
      const image = await this.find(`${key}/${name}`);
      if (image) return image;
    }
    return null;
  }
}

function definition(os: string): OsDefinition {
  const d = OS_DEFINITIONS[os];
  if (!d) throw new Error(`unknown operating system ${JSON.stringify(os)}`);
  return d;
}

export function mirrorSetting(os: string): string {
  const family = definition(os).family;
  return family === 'debian' ? 'HANGAR_MIRROR_DEBIAN' : family === 'ubuntu' ? 'HANGAR_MIRROR_UBUNTU' : 'HANGAR_MIRROR_ALPINE';
}

function describeFetchError(err: Error): string {
  if (err.name === 'TimeoutError' || err.name === 'AbortError') return `no answer within ${PROBE_TIMEOUT_MS / 1000} s`;
  const cause = (err as Error & { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? err.message;
}

/**
 * `sh -ec SCRIPT build-os-image <tmp> <final> <base> <resolv.conf> <keyring> <release> <sources...>` (Alpine:
 * `... <keys folder> <branch> <apk.static> <mirror> <arch>`), run under
 * the image's lock. Does nothing when another process finished a generation while this one waited for the lock
 * (and no rebuild is asked for). Builds into <tmp>/rootfs, then splits it into <tmp>/root (with an empty /usr to
 * mount on) and <tmp>/usr, adds what every layer below a sandbox needs (the agent's mount point, DNS, a hostname)
 * and renames <tmp> to <final>.
 */
function buildScript(d: OsDefinition): string {
  const common = `
tmp=$1; final=$2; base=$3; resolv=$4; keyring=$5; release=$6; shift 6
newest=$(ls -1 "$base" | grep -E '^[0-9TZ]+$' | sort | tail -n 1 || true)
if [ -n "$newest" ] && [ -e "$base/$newest/.complete" ] && [ ! -e "$base/REBUILD" ]; then
  echo "another build made this image meanwhile: using it"; exit 0
fi
rm -rf "$tmp"; mkdir -p "$tmp"
`;
  const finish = `
cd "$tmp"
mv rootfs root
mv root/usr usr
mkdir -m 0755 root/usr
mkdir -p -m 0755 root/.hangar
: > root/.hangar/agent; chmod 0755 root/.hangar/agent
mkdir -p -m 0755 root/home
rm -f root/etc/resolv.conf root/etc/hostname root/etc/hosts
grep -E '^[[:space:]]*nameserver[[:space:]]' "$resolv" | grep -v -E 'nameserver[[:space:]]+(127\\.|::1)' > root/etc/resolv.conf || true
echo sandbox > root/etc/hostname
printf '127.0.0.1\\tlocalhost sandbox\\n::1\\tlocalhost ip6-localhost ip6-loopback\\n' > root/etc/hosts
: > root/etc/machine-id
chmod 0755 root usr
date -u +%Y-%m-%dT%H:%M:%SZ > .complete
mv "$tmp" "$final"
rm -f "$base/REBUILD"
`;
  if (d.family === 'alpine') {
    // <keyring> is the folder of Alpine's keys; then <apk.static> <mirror> <arch>. apk verifies every package it
    // installs against those keys; the image keeps them (and main + community) for the apk of template builds.
    return `${common}
apk=$1; mirror=$2; arch=$3
[ -x "$apk" ] || { echo "no verified apk.static at $apk" >&2; exit 1; }
mkdir -p -m 0755 "$tmp/rootfs/etc/apk/keys"
cp "$keyring"/*.rsa.pub "$tmp/rootfs/etc/apk/keys/"
printf '%s/%s/main\\n%s/%s/community\\n' "$mirror" "$release" "$mirror" "$release" > "$tmp/rootfs/etc/apk/repositories"
# The server's own CAs first, so ca-certificates' trigger puts them in the image's bundle.
if ls ${LOCAL_CAS}/*.crt >/dev/null 2>&1; then mkdir -p "$tmp/rootfs${LOCAL_CAS}"; cp -L ${LOCAL_CAS}/*.crt "$tmp/rootfs${LOCAL_CAS}/"; fi
"$apk" --root "$tmp/rootfs" --initdb --keys-dir "$keyring" --repository "$mirror/$release/main" --arch "$arch" \\
  --no-cache --no-progress add alpine-base ca-certificates
rm -rf "$tmp/rootfs"/var/cache/apk/*
${finish}`;
  }
  const keyHelp =
    d.family === 'ubuntu'
      ? "no Ubuntu archive keyring at $keyring: install Ubuntu's archive keyring there (package ubuntu-keyring on Ubuntu) or set HANGAR_UBUNTU_KEYRING, so apt can verify the mirror"
      : 'no Debian archive keyring at $keyring (package debian-archive-keyring)';
  return `${common}
[ -s "$keyring" ] || { echo "${keyHelp}" >&2; exit 1; }
# minbase: Essential packages, plus apt (Ubuntu's minbase lacks it) and ca-certificates; apt verifies every Release file against the keyring.
mmdebstrap --mode=root --variant=minbase --format=directory --include=apt,ca-certificates \\
  --keyring="$keyring" --aptopt='Acquire::Retries "3"' --aptopt='Acquire::http::Timeout "30"' \\
  --customize-hook='if ls ${LOCAL_CAS}/*.crt >/dev/null 2>&1; then mkdir -p "$1${LOCAL_CAS}"; cp -L ${LOCAL_CAS}/*.crt "$1${LOCAL_CAS}/"; chroot "$1" update-ca-certificates; fi' \\
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \\
  "$release" "$tmp/rootfs" "$@"
${finish}`;
}

/** Runs a command, passing each output line to `log`; fails with the last lines of its stderr. */
function run(cmd: string, args: string[], log: (line: string) => Promise<void>, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    // Its own process group, so a cancel or the timeout ends mmdebstrap and apt too, not only flock.
    const child = spawn(cmd, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8', DEBIAN_FRONTEND: 'noninteractive' },
      detached: true,
    });
    let stopped: string | null = null;
    const stop = (why: string) => {
      stopped ??= why;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        /* already gone */
      }
    };
    const onAbort = () => stop('the build was cancelled');
    if (signal?.aborted) onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => stop(`building the OS image took longer than ${BUILD_TIMEOUT_MS / 60_000} minutes`), BUILD_TIMEOUT_MS);
    const tail: string[] = [];
    let chain = Promise.resolve();
    const feed = (stream: NodeJS.ReadableStream, keep: boolean) => {
      let carry = '';
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => {
        const lines = (carry + chunk).split(/\r?\n|\r/);
        carry = lines.pop()!;
        for (const raw of lines) {
          const line = raw.length > LOG_LINE_CHARS ? `${raw.slice(0, LOG_LINE_CHARS)}…` : raw;
          if (!line.trim()) continue;
          if (keep) {
            tail.push(line);
            if (tail.length > 5) tail.shift();
          }
          chain = chain.then(() => log(line)).catch(() => undefined);
        }
      });
      stream.on('end', () => {
        if (carry.trim()) {
          if (keep) tail.push(carry);
          chain = chain.then(() => log(carry)).catch(() => undefined);
        }
      });
    };
    feed(child.stdout!, false);
    feed(child.stderr!, true);
    child.on('error', reject);
    child.on('close', (code, sig) => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      void chain.then(() => {
        if (stopped) return reject(new Error(stopped));
        if (code === 0) return resolve();
        const why = tail.filter((l) => /error|^E:|fail|no |not /i.test(l)).pop() ?? tail[tail.length - 1] ?? `exit ${code ?? sig}`;
        reject(new Error(`building the OS image failed: ${why.replace(/^E:\s*/, '')}`));
      });
    });
  });
}

/**
 * `sh -ec SCRIPT ubuntu-keyring <work> <fingerprint>...`: unpacks the archive keyring from <work>/keyring.deb into
 * a throw-away gpg home, lists its primary keys' fingerprints in <work>/fingerprints, and exports only the pinned
 * ones to <work>/pinned.gpg.
 */
const UBUNTU_KEYRING_SCRIPT = `
work=$1; shift
dpkg-deb --fsys-tarfile "$work/keyring.deb" | tar -xO ./usr/share/keyrings/ubuntu-archive-keyring.gpg > "$work/archive.gpg"
gpg --homedir "$work/gnupg" --batch --quiet --import "$work/archive.gpg" 2>/dev/null
gpg --homedir "$work/gnupg" --batch --with-colons --list-keys | awk -F: '$1=="pub"{p=1;next} p&&$1=="fpr"{print $10;p=0}' > "$work/fingerprints"
gpg --homedir "$work/gnupg" --batch --export "$@" > "$work/pinned.gpg"
gpgconf --homedir "$work/gnupg" --kill all 2>/dev/null || true
`;

async function nonEmptyFile(p: string): Promise<boolean> {
  const st = await fs.stat(p).catch(() => null);
  return Boolean(st?.isFile() && st.size > 0);
}

async function exists(p: string): Promise<boolean> {
  return fs.access(p).then(
    () => true,
    () => false,
  );
}
