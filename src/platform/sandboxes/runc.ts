import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants, openSync, closeSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import { AgentClient } from './agent-client.js';
import { ensureBaseLayer, nameservers } from './base-layer.js';
import { SandboxNetwork } from './network.js';
import type { BaseInfo, ContainerSpec, ContainerStatus, Layer, SandboxRuntime } from './types.js';

const execFileP = promisify(execFile);

export interface RuncOptions {
  /** HANGAR_SANDBOX_DIR: base layers (shared by installations), and per installation its layers and containers. */
  dir: string;
  /** Names this installation's folder and runc state root, so two installations on one host never touch each other's containers. */
  installId: string;
  agentBinary: string;
  subnetOctet: number;
  /** HANGAR_SANDBOX_NETWORK_ALLOW: private networks sandboxes and builds may reach all the same. */
  networkAllow?: readonly string[];
  log: Logger;
  runc?: string;
}

/** Docker's default capability set, for template builds only (apt and maintainer scripts need them). Sandboxes get none. */
const BUILD_CAPS = [
  'CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_FOWNER', 'CAP_FSETID', 'CAP_KILL', 'CAP_SETGID', 'CAP_SETUID',
  'CAP_SETPCAP', 'CAP_NET_BIND_SERVICE', 'CAP_SYS_CHROOT', 'CAP_SETFCAP', 'CAP_AUDIT_WRITE',
];

const EPERM = 1;
const ENOSYS = 38;
const CLONE_NEWUSER = 0x10000000;

/**
 * A deny-list in the spirit of Docker's default profile: what a process without capabilities could still
 * reach of the kernel's rarer surfaces. New user namespaces are the big one (unshare, clone with
 * CLONE_NEWUSER; clone3 answers ENOSYS so libc falls back to clone, whose flags can be checked).
 */
const SECCOMP = {
  defaultAction: 'SCMP_ACT_ALLOW',
  architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
  syscalls: [
    {
      names: [
        'unshare', 'setns', 'mount', 'umount', 'umount2', 'pivot_root', 'chroot', 'move_mount', 'open_tree', 'fsopen',
        'fsconfig', 'fsmount', 'fspick', 'mount_setattr', 'keyctl', 'add_key', 'request_key', 'bpf', 'perf_event_open',
        'kexec_load', 'kexec_file_load', 'init_module', 'finit_module', 'delete_module', 'open_by_handle_at',
        'name_to_handle_at', 'userfaultfd', 'acct', 'swapon', 'swapoff', 'reboot', 'syslog', 'quotactl', 'lookup_dcookie',
        'iopl', 'ioperm', 'settimeofday', 'clock_settime', 'clock_adjtime', 'adjtimex', 'vhangup', 'nfsservctl',
      ],
      action: 'SCMP_ACT_ERRNO',
      errnoRet: EPERM,
    },
    {
      names: ['clone'],
      action: 'SCMP_ACT_ERRNO',
      errnoRet: EPERM,
      args: [{ index: 0, value: CLONE_NEWUSER, valueTwo: CLONE_NEWUSER, op: 'SCMP_CMP_MASKED_EQ' }],
    },
    { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
  ],
};

/**
 * Persistent containers run by runc (ADR 0010). Root filesystem = overlay of the template's read-only layers
 * (and the base layer below them) under the container's own writable layer, /usr stacked the same way as a
 * second overlay. The container's PID 1 is the agent (native/sandbox-agent), which takes requests on a Unix
 * socket that Hangar creates and hands over as fd 3; runc's containers are re-parented away from Hangar, so
 * they (and their agents) outlive it and are found again by `list()` after a restart.
 */
export class RuncRuntime implements SandboxRuntime {
  readonly available = true;
  readonly unavailableReason = null;
  private readonly agents = new Map<string, AgentClient>();
  private readonly installDir: string;
  private readonly stateRoot: string;
  private readonly runc: string;
  /** The agent binary containers bind in: a copy under /run/hangar/agent (see stageAgent). */
  private agentPath: string;

  private constructor(
    private readonly opts: RuncOptions,
    private readonly baseRoot: string,
    private readonly baseUsr: string[],
    readonly base: BaseInfo,
    private readonly network: SandboxNetwork | null,
    readonly networkReason: string | null,
  ) {
    this.installDir = path.join(opts.dir, opts.installId);
    this.stateRoot = path.join('/run/hangar/runc', opts.installId);
    this.runc = opts.runc ?? 'runc';
    this.agentPath = opts.agentBinary;
  }

  static async create(opts: RuncOptions): Promise<RuncRuntime> {
    if (process.getuid?.() !== 0) throw new Error('persistent sandboxes need Hangar to run as root (runc creates containers)');
    const runc = opts.runc ?? 'runc';
    await execFileP(runc, ['--version']).catch(() => {
      throw new Error('runc is not installed (Debian package "runc"; scripts/setup.sh installs it)');
    });
    await fs.access(opts.agentBinary, constants.X_OK).catch(() => {
      throw new Error(`the sandbox agent ${opts.agentBinary} is missing (built by scripts/setup.sh from native/sandbox-agent; needs golang-go)`);
    });
    if (!(await fs.readFile('/proc/filesystems', 'utf8')).includes('overlay')) throw new Error('the kernel has no overlay filesystem');
    await fs.mkdir(path.join(opts.dir, opts.installId, 'containers'), { recursive: true, mode: 0o700 });
    await fs.mkdir(path.join(opts.dir, opts.installId, 'layers'), { recursive: true, mode: 0o700 });
    await fs.chmod(opts.dir, 0o711).catch(() => undefined);
    const { root, usr, info } = await ensureBaseLayer(opts.dir);
    let network: SandboxNetwork | null = null;
    let networkReason: string | null = null;
    try {
      const resolvers = nameservers(await fs.readFile(path.join(root, 'etc/resolv.conf'), 'utf8').catch(() => ''));
      network = await SandboxNetwork.setup(opts.subnetOctet, { resolvers, allow: opts.networkAllow ?? [] });
    } catch (err) {
      networkReason = `sandbox networking could not be set up on this host: ${(err as Error).message}`;
      opts.log.warn({ err }, networkReason);
    }
    const runtime = new RuncRuntime(opts, root, usr, info, network, networkReason);
    runtime.agentPath = await stageAgent(opts.agentBinary);
    return runtime;
  }

  private dirOf(id: string): string {
    return path.join(this.installDir, 'containers', id);
  }

  layerOf(templateId: string): Layer {
    const dir = path.join(this.installDir, 'layers', templateId);
    return { root: path.join(dir, 'root'), usr: path.join(dir, 'usr') };
  }

  async newLayer(templateId: string): Promise<Layer> {
    await this.removeLayer(templateId);
    const layer = this.layerOf(templateId);
    await fs.mkdir(layer.root, { recursive: true, mode: 0o755 });
    await fs.mkdir(layer.usr, { recursive: true, mode: 0o755 });
    return layer;
  }

  async removeLayer(templateId: string): Promise<void> {
    await fs.rm(path.join(this.installDir, 'layers', templateId), { recursive: true, force: true });
  }

  agent(id: string): AgentClient {
    let client = this.agents.get(id);
    if (!client) {
      client = new AgentClient(path.join(this.dirOf(id), 'agent.sock'));
      this.agents.set(id, client);
    }
    return client;
  }

  async start(spec: ContainerSpec): Promise<void> {
    const dir = this.dirOf(spec.id);
    const rootfs = path.join(dir, 'rootfs');
    const upper = spec.upper ?? { root: path.join(dir, 'upper/root'), usr: path.join(dir, 'upper/usr') };
    const fresh = !(await exists(upper.root));
    for (const d of [upper.root, upper.usr, path.join(dir, 'work/root'), path.join(dir, 'work/usr'), rootfs]) {
      await fs.mkdir(d, { recursive: true, mode: 0o755 });
    }
    if (fresh && !spec.build) await this.personalize(upper.root, spec);
    await this.mountLayers(spec, rootfs, upper, dir);

    let netnsPath: string | null = null;
    if (spec.network) {
      if (!this.network) throw new Error(this.networkReason ?? 'sandbox networking is unavailable');
      netnsPath = (await this.network.attach(spec.id)).netnsPath;
    }
    await fs.writeFile(path.join(dir, 'config.json'), JSON.stringify(this.ociConfig(spec, rootfs, netnsPath)));

    // The agent's listening socket: created here (root-owned folder the sandbox cannot reach, so nothing in it
    // can swap the path for a link), handed to the container as fd 3. libuv unlinks a pipe's path when the
    // server closes, so it listens on a temporary name that is renamed into place before then.
    const sock = path.join(dir, 'agent.sock');
    const tmpSock = `${sock}.${process.pid}.tmp`;
    await fs.rm(sock, { force: true });
    await fs.rm(tmpSock, { force: true });
    const server = net.createServer();
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(tmpSock, 511, resolve));
    const fd = (server as unknown as { _handle: { fd: number } })._handle.fd;
    await fs.rename(tmpSock, sock);
    const logFd = openSync(path.join(dir, 'agent.log'), 'a', 0o600);
    try {
      await this.runcCall(['run', '--detach', '--preserve-fds', '1', '--bundle', dir, spec.id], ['ignore', logFd, logFd, fd], dir);
    } catch (err) {
      await this.teardown(spec.id).catch(() => undefined);
      throw err;
    } finally {
      closeSync(logFd);
      server.close();
    }
    this.agents.get(spec.id)?.close();
    this.agents.delete(spec.id);
    await this.agent(spec.id).health(10_000);
  }

  async pause(id: string): Promise<void> {
    await this.runcCall(['pause', id]);
  }

  async resume(id: string): Promise<void> {
    await this.runcCall(['resume', id]);
  }

  async stop(id: string): Promise<void> {
    await this.teardown(id);
  }

  async destroy(id: string): Promise<void> {
    await this.teardown(id);
    await fs.rm(this.dirOf(id), { recursive: true, force: true });
  }

  async list(): Promise<Map<string, ContainerStatus>> {
    const out = new Map<string, ContainerStatus>();
    const { stdout } = await execFileP(this.runc, ['--root', this.stateRoot, 'list', '--format', 'json']);
    const rows = (JSON.parse(stdout.trim() || 'null') ?? []) as { id: string; status: string }[];
    for (const row of rows) {
      out.set(row.id, row.status === 'paused' ? 'paused' : row.status === 'running' ? 'running' : 'stopped');
    }
    return out;
  }

  async removeInstallation(): Promise<void> {
    for (const id of (await this.list()).keys()) await this.destroy(id).catch(() => undefined);
    for (const id of await fs.readdir(path.join(this.installDir, 'containers')).catch(() => [] as string[])) {
      await this.destroy(id).catch(() => undefined);
    }
    await fs.rm(this.installDir, { recursive: true, force: true });
    await fs.rm(this.stateRoot, { recursive: true, force: true });
    // runc removes each container's cgroup; the installation's parent group stays in every controller.
    for (const controller of await fs.readdir('/sys/fs/cgroup').catch(() => [] as string[])) {
      await fs.rmdir(path.join('/sys/fs/cgroup', controller, 'hangar-sandboxes', this.opts.installId)).catch(() => undefined);
    }
  }

  async close(): Promise<void> {
    for (const client of this.agents.values()) client.close();
    this.agents.clear();
  }

  /** Kills and deletes the container (if any), unmounts its layers and removes its network; keeps its writable layer. */
  private async teardown(id: string): Promise<void> {
    this.agents.get(id)?.close();
    this.agents.delete(id);
    await execFileP(this.runc, ['--root', this.stateRoot, 'delete', '--force', id]).catch(() => undefined);
    const rootfs = path.join(this.dirOf(id), 'rootfs');
    for (const target of [path.join(rootfs, 'usr'), rootfs]) {
      if (await isMountPoint(target)) {
        await execFileP('umount', [target]).catch(() => execFileP('umount', ['-l', target]));
      }
    }
    await this.network?.detach(id);
  }

  /** The sandbox user's passwd/group entries and home folder, written into a new writable layer before it is mounted. */
  private async personalize(upperRoot: string, spec: ContainerSpec): Promise<void> {
    await fs.mkdir(path.join(upperRoot, 'etc'), { recursive: true, mode: 0o755 });
    const passwd = await fs.readFile(path.join(this.baseRoot, 'etc/passwd'), 'utf8');
    const group = await fs.readFile(path.join(this.baseRoot, 'etc/group'), 'utf8');
    await fs.writeFile(path.join(upperRoot, 'etc/passwd'), `${passwd}user:x:${spec.uid}:${spec.uid}:Sandbox user:/home/user:/bin/bash\n`);
    await fs.writeFile(path.join(upperRoot, 'etc/group'), `${group}user:x:${spec.uid}:\n`);
    await fs.writeFile(path.join(upperRoot, 'etc/hostname'), `${spec.hostname}\n`);
    await fs.writeFile(path.join(upperRoot, 'etc/hosts'), `127.0.0.1\tlocalhost ${spec.hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n`);
    const home = path.join(upperRoot, 'home/user');
    await fs.mkdir(home, { recursive: true, mode: 0o755 });
    await fs.chown(home, spec.uid, spec.uid);
    if (spec.workdir !== '/home/user' && spec.workdir !== '/') {
      const wd = path.join(upperRoot, spec.workdir);
      await fs.mkdir(wd, { recursive: true, mode: 0o755 });
      await fs.chown(wd, spec.uid, spec.uid);
    }
  }

  private async mountLayers(spec: ContainerSpec, rootfs: string, upper: Layer, dir: string): Promise<void> {
    if (!(await isMountPoint(rootfs))) {
      await overlay(path.join(dir, 'ovl/root'), [...spec.layers.map((l) => l.root), this.baseRoot], upper.root, path.join(dir, 'work/root'), rootfs);
    }
    const usr = path.join(rootfs, 'usr');
    if (!(await isMountPoint(usr))) {
      await overlay(path.join(dir, 'ovl/usr'), [...spec.layers.map((l) => l.usr), ...this.baseUsr, '/usr'], upper.usr, path.join(dir, 'work/usr'), usr);
    }
  }

  private ociConfig(spec: ContainerSpec, rootfs: string, netnsPath: string | null): object {
    const caps = spec.build ? BUILD_CAPS : [];
    const env = { ...spec.env };
    return {
      ociVersion: '1.0.2',
      process: {
        terminal: false,
        user: { uid: spec.uid, gid: spec.uid },
        args: ['/.hangar/agent'],
        env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
        cwd: '/',
        capabilities: { bounding: caps, effective: caps, permitted: caps, inheritable: [], ambient: [] },
        noNewPrivileges: true,
      },
      root: { path: rootfs, readonly: false },
      hostname: spec.hostname,
      mounts: [
        { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
        { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
        { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620'] },
        { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
        { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
        { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
        { destination: '/run', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777', 'size=65536k'] },
        { destination: '/.hangar/agent', type: 'bind', source: this.agentPath, options: ['bind', 'ro', 'nosuid', 'nodev'] },
      ],
      linux: {
        namespaces: [
          { type: 'pid' },
          netnsPath ? { type: 'network', path: netnsPath } : { type: 'network' },
          { type: 'ipc' },
          { type: 'uts' },
          { type: 'mount' },
          { type: 'cgroup' },
        ],
        cgroupsPath: `/hangar-sandboxes/${this.opts.installId}/${spec.id}`,
        resources: {
          devices: [{ allow: false, access: 'rwm' }],
          memory: { limit: spec.memoryMb * 1024 * 1024, swap: spec.memoryMb * 1024 * 1024 },
          cpu: { quota: Math.round(spec.cpu * 100_000), period: 100_000 },
          pids: { limit: spec.pids },
        },
        seccomp: SECCOMP,
        maskedPaths: [
          '/proc/acpi', '/proc/asound', '/proc/kcore', '/proc/keys', '/proc/latency_stats', '/proc/timer_list',
          '/proc/timer_stats', '/proc/sched_debug', '/sys/firmware', '/proc/scsi', '/sys/fs/cgroup',
        ],
        readonlyPaths: ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'],
      },
    };
  }

  private runcCall(args: string[], stdio: ('ignore' | 'pipe' | number)[] = ['ignore', 'ignore', 'pipe'], logDir?: string): Promise<void> {
    const log = logDir ? ['--log', path.join(logDir, 'runc.log'), '--log-format', 'json'] : [];
    return new Promise((resolve, reject) => {
      const child = spawn(this.runc, ['--root', this.stateRoot, ...log, ...args], {
        stdio: stdio as never,
        env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' },
      });
      let stderr = '';
      child.stderr?.on('data', (d) => (stderr += d));
      child.on('error', reject);
      child.on('close', async (code) => {
        if (code === 0) return resolve();
        let detail = stderr.trim();
        if (!detail && logDir) detail = await lastRuncError(path.join(logDir, 'runc.log'));
        reject(new Error(`runc ${args[0]} failed: ${detail.replace(/^time=\S+ level=error msg=/, '') || `exit ${code}`}`));
      });
    });
  }
}

async function lastRuncError(file: string): Promise<string> {
  const text = await fs.readFile(file, 'utf8').catch(() => '');
  const lines = text.trim().split('\n').reverse();
  for (const line of lines) {
    try {
      const entry = JSON.parse(line) as { level?: string; msg?: string };
      if (entry.level === 'error' && entry.msg) return entry.msg;
    } catch {
      /* not a JSON line */
    }
  }
  return '';
}

/**
 * Mounts an overlay whose options name no host path: the kernel shows lowerdir/upperdir/workdir in mountinfo (also
 * to the container) exactly as given, so each layer is given as a relative name (`0`, `1`, ..., `upper`, `work`)
 * of a symlink in `links`, resolved against mount's working directory when mounting.
 */
async function overlay(links: string, lower: string[], upper: string, work: string, target: string): Promise<void> {
  await fs.rm(links, { recursive: true, force: true });
  await fs.mkdir(links, { recursive: true, mode: 0o700 });
  const names = lower.map((_, i) => String(i));
  for (const [i, layer] of lower.entries()) await fs.symlink(layer, path.join(links, names[i]!));
  await fs.symlink(upper, path.join(links, 'upper'));
  await fs.symlink(work, path.join(links, 'work'));
  await execFileP('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${names.join(':')},upperdir=upper,workdir=work`, target], { cwd: links });
}

/**
 * A copy of the agent binary at `/run/hangar/agent/<content hash>`: a bind mount shows its source's path in the
 * container's mountinfo, and this one names neither the checkout nor the installation.
 */
async function stageAgent(binary: string): Promise<string> {
  const data = await fs.readFile(binary);
  const dir = '/run/hangar/agent';
  const target = path.join(dir, createHash('sha256').update(data).digest('hex').slice(0, 16));
  if (await exists(target)) return target;
  await fs.mkdir(dir, { recursive: true, mode: 0o711 });
  const tmp = `${target}.${process.pid}.tmp`;
  await fs.writeFile(tmp, data, { mode: 0o755 });
  await fs.rename(tmp, target);
  return target;
}

async function isMountPoint(p: string): Promise<boolean> {
  const info = await fs.readFile('/proc/self/mountinfo', 'utf8');
  const escaped = p.replace(/[ \t\n\\]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, '0')}`);
  return info.split('\n').some((line) => line.split(' ')[4] === escaped);
}

async function exists(p: string): Promise<boolean> {
  return fs.access(p).then(
    () => true,
    () => false,
  );
}
