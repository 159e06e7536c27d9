import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants, existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import { cgroupSetup, type CgroupInfo } from '../isolation/cgroups.js';
import { AgentClient } from './agent-client.js';
import { ensureBaseLayer, nameservers } from './base-layer.js';
import { SandboxNetwork } from './network.js';
import { type Mirrors, OsImages } from './os-images.js';
import type { Assignment, BaseInfo, ContainerSpec, ContainerStatus, Layer, SandboxRuntime } from './types.js';

const execFileP = promisify(execFile);

/** Where the agents' sockets live, one folder per installation (see `socketDir`). */
const AGENT_SOCKETS = '/run/hangar/agents';

export interface RuncOptions {
  /** HANGAR_SANDBOX_DIR: base layers (shared by installations), and per installation its layers and containers. */
  dir: string;
  /** Names this installation's folder and runc state root, so two installations on one host never touch each other's containers. */
  installId: string;
  agentBinary: string;
  subnetOctet: number;
  /** HANGAR_SANDBOX_NETWORK_ALLOW: private networks sandboxes and builds may reach all the same. */
  networkAllow?: readonly string[];
  /** Package mirrors OS images are built from (ADR 0022). */
  mirrors: Mirrors;
  log: Logger;
  runc?: string;
}

/** Docker's default capability set, for template builds only (apt and maintainer scripts need them). Sandboxes get none. */
const BUILD_CAPS = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FOWNER',
  'CAP_FSETID',
  'CAP_KILL',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_SETFCAP',
  'CAP_AUDIT_WRITE',
];

/**
 * The agent's own uid in a sandbox: the sandbox user's uid + this offset (sandbox users are 200000..249999,
 * so agents are 300000..349999, clear of them, of one-shot execution's 60000..65533 and of host accounts).
 * User commands cannot signal, trace or inspect a process of another uid (ADR 0013).
 */
export const AGENT_UID_OFFSET = 100_000;

/**
 * What runc gives a sandbox's agent, in all five sets (ambient too: a non-root uid keeps capabilities across
 * execve only through the ambient set). The agent then empties ambient, inheritable and bounding on all its
 * threads and drops CAP_SETPCAP (needed for the bounding drop only): it keeps SETUID/SETGID (to start
 * commands as the user, and for the user's file-system identity in file operations) and KILL (to signal
 * the user's processes); commands end with none.
 */
const AGENT_CAPS = ['CAP_SETUID', 'CAP_SETGID', 'CAP_KILL', 'CAP_SETPCAP'];

const EPERM = 1;
const ENOSYS = 38;
const CLONE_NEWUSER = 0x10000000;

/**
 * A deny-list in the spirit of Docker's default profile: what a process without capabilities could still
 * reach of the kernel's rarer surfaces. New user namespaces are the big one (unshare, clone with
 * CLONE_NEWUSER; clone3 answers ENOSYS so libc falls back to clone, whose flags can be checked). The rest of
 * one-shot execution's list (native/reaper.c) too: no ptrace, no reading or writing another process's
 * memory, no copying another process's descriptors (pidfd_getfd), no io_uring (its own path around the
 * seccomp filter), no fanotify. Used for sandboxes and template builds alike (apt needs none of them).
 */
const SECCOMP = {
  defaultAction: 'SCMP_ACT_ALLOW',
  architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
  syscalls: [
    {
      names: [
        'unshare',
        'setns',
        'mount',
        'umount',
        'umount2',
        'pivot_root',
        'chroot',
        'move_mount',
        'open_tree',
        'fsopen',
        'fsconfig',
        'fsmount',
        'fspick',
        'mount_setattr',
        'keyctl',
        'add_key',
        'request_key',
        'bpf',
        'perf_event_open',
        'kexec_load',
        'kexec_file_load',
        'init_module',
        'finit_module',
        'delete_module',
        'open_by_handle_at',
        'name_to_handle_at',
        'userfaultfd',
        'acct',
        'swapon',
        'swapoff',
        'reboot',
        'syslog',
        'quotactl',
        'lookup_dcookie',
        'iopl',
        'ioperm',
        'settimeofday',
        'clock_settime',
        'clock_adjtime',
        'adjtimex',
        'vhangup',
        'nfsservctl',
        'ptrace',
        'process_vm_readv',
        'process_vm_writev',
        'pidfd_getfd',
        'io_uring_setup',
        'io_uring_enter',
        'io_uring_register',
        'fanotify_init',
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
  /**
   * The agents' sockets: short paths under /run whatever HANGAR_SANDBOX_DIR is (a Unix socket's path is capped at
   * 107 bytes), root-only, so nothing in a sandbox can reach or swap them.
   */
  private readonly socketDir: string;
  private readonly runc: string;
  /** The agent binary containers bind in: a copy under /run/hangar/agent (see stageAgent). */
  private agentPath: string;
  readonly images: OsImages;

  private constructor(
    private readonly opts: RuncOptions,
    private readonly baseRoot: string,
    private readonly baseUsr: string[],
    readonly base: BaseInfo,
    private readonly network: SandboxNetwork | null,
    readonly networkReason: string | null,
    /** The cgroup hierarchy containers are limited through, and Hangar's subtree in it (ADR 0020). */
    readonly cgroup: CgroupInfo,
  ) {
    this.installDir = path.join(opts.dir, opts.installId);
    this.stateRoot = path.join('/run/hangar/runc', opts.installId);
    this.socketDir = path.join(AGENT_SOCKETS, opts.installId);
    this.runc = opts.runc ?? 'runc';
    this.agentPath = opts.agentBinary;
    this.images = new OsImages(opts.dir, opts.mirrors, opts.log);
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
    // Each sandbox's writable layer is an ext4 image of its own size on a loop device (ADR 0014).
    for (const [tool, pkg] of [
      ['mkfs.ext4', 'e2fsprogs'],
      ['losetup', 'util-linux'],
    ] as const) {
      await execFileP(tool, ['-V']).catch(() => {
        throw new Error(`${tool} is not installed (Debian package "${pkg}"; scripts/setup.sh installs it)`);
      });
    }
    await fs.access('/dev/loop-control').catch(() => {
      throw new Error('the kernel has no loop devices (/dev/loop-control); sandbox disks are loop-mounted images');
    });
    // runc's cgroupfs driver on either hierarchy; on v2 inside the subtree Hangar delegates to itself (ADR 0020).
    const cgroup = await cgroupSetup();
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
    const runtime = new RuncRuntime(opts, root, usr, info, network, networkReason, cgroup);
    runtime.agentPath = await stageAgent(opts.agentBinary);
    return runtime;
  }

  private dirOf(id: string): string {
    return path.join(this.installDir, 'containers', id);
  }

  /** A container's agent socket; one started by a version that kept it in the container's folder is found there. */
  private socketOf(id: string): string {
    const socket = path.join(this.socketDir, `${id}.sock`);
    const legacy = path.join(this.dirOf(id), 'agent.sock');
    return !existsSync(socket) && existsSync(legacy) ? legacy : socket;
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
      client = new AgentClient(this.socketOf(id));
      this.agents.set(id, client);
    }
    return client;
  }

  async start(spec: ContainerSpec): Promise<void> {
    // A CFS quota of 0 means no limit at all (runc then sets none): never let one through.
    const quota = Math.round(spec.cpu * 100_000);
    if (!(quota >= 1_000)) throw new Error(`cpu ${spec.cpu} is below the smallest quota (0.01 core)`);
    const dir = this.dirOf(spec.id);
    const rootfs = path.join(dir, 'rootfs');
    await fs.mkdir(dir, { recursive: true, mode: 0o755 });
    await this.mountDisk(dir, spec.diskMb);
    const upper = { root: path.join(dir, 'upper/root'), usr: path.join(dir, 'upper/usr') };
    const fresh = !(await exists(upper.root));
    for (const d of [upper.root, upper.usr, path.join(dir, 'upper/work/root'), path.join(dir, 'upper/work/usr'), rootfs]) {
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
    await fs.mkdir(this.socketDir, { recursive: true, mode: 0o700 });
    await fs.rm(path.join(dir, 'agent.sock'), { force: true });
    const sock = path.join(this.socketDir, `${spec.id}.sock`);
    const tmpSock = `${sock}.${process.pid}.tmp`;
    await fs.rm(sock, { force: true });
    await fs.rm(tmpSock, { force: true });
    const server = net.createServer();
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(tmpSock, 511, resolve));
    const fd = (server as unknown as { _handle: { fd: number } })._handle.fd;
    await fs.rename(tmpSock, sock);
    // The container's stdio is /dev/null: nothing of the host is held by its processes (the agent keeps its
    // log in memory, GET /log); runc's own errors go to the root-only runc.log, which runc init never passes on.
    try {
      await this.runcCall(['run', '--detach', '--preserve-fds', '1', '--bundle', dir, spec.id], ['ignore', 'ignore', 'ignore', fd], dir);
    } catch (err) {
      await this.teardown(spec.id).catch(() => undefined);
      throw err;
    } finally {
      server.close();
    }
    this.agents.get(spec.id)?.close();
    this.agents.delete(spec.id);
    await this.agent(spec.id).health(10_000);
  }

  /**
   * A pooled container becomes a tenant's (ADR 0023). Nothing has run in it but its agent, so its root (the
   * overlay as mounted on the host) holds nothing a tenant put there: /etc/hostname and /etc/hosts are written
   * through it, and the UTS namespace's name set by entering just that namespace. Limits go through
   * `runc update`; the environment to the agent, which takes it only before its first process.
   */
  async assign(id: string, a: Assignment): Promise<void> {
    if (a.hostname !== undefined) {
      const etc = path.join(this.dirOf(id), 'rootfs/etc');
      await fs.writeFile(path.join(etc, 'hostname'), `${a.hostname}\n`);
      await fs.writeFile(path.join(etc, 'hosts'), `127.0.0.1\tlocalhost ${a.hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n`);
      const state = JSON.parse(await fs.readFile(path.join(this.stateRoot, id, 'state.json'), 'utf8')) as { init_process_pid?: number };
      if (!state.init_process_pid) throw new Error(`runc has no process for ${id}`);
      await execFileP('nsenter', ['--target', String(state.init_process_pid), '--uts', 'hostname', a.hostname]);
    }
    if (a.limits) {
      const quota = Math.round(a.limits.cpu * 100_000);
      if (!(quota >= 1_000)) throw new Error(`cpu ${a.limits.cpu} is below the smallest quota (0.01 core)`);
      const bytes = String(a.limits.memoryMb * 1024 * 1024);
      await this.runcCall([
        'update',
        '--cpu-quota',
        String(quota),
        '--cpu-period',
        '100000',
        '--memory',
        bytes,
        '--memory-swap',
        bytes,
        '--pids-limit',
        String(a.limits.pids),
        id,
      ]);
    }
    await this.agent(id).setBaseEnv(a.env);
  }

  async spareNetworks(count: number): Promise<boolean> {
    return (await this.network?.spare(count)) ?? false;
  }

  /**
   * Freezes the container through its cgroup's freezer directly (v1 freezer.state, v2 cgroup.freeze) and waits until
   * the kernel says frozen: what `runc pause` does, without starting a runc process (~10 ms). runc keeps no paused
   * flag of its own: `runc list`/`state` read the freezer, so they report it paused all the same (ADR 0020). A
   * container whose cgroup is not there (gone, or never started) goes through runc, which says why.
   */
  async pause(id: string): Promise<void> {
    if (!(await this.freeze(id, true))) await this.runcCall(['pause', id]);
  }

  async resume(id: string): Promise<void> {
    if (!(await this.freeze(id, false))) await this.runcCall(['resume', id]);
  }

  /** The container's cgroup directory (the freezer's on v1) under the mount. */
  private cgroupDir(id: string): string {
    if (this.cgroup.version === 'v1') return path.join(this.cgroup.mount, 'freezer', this.cgroupsPath(id));
    return path.join(this.cgroup.mount, this.cgroupsPath(id));
  }

  /** runc's cgroupsPath (relative to the mount, or to each v1 controller's mount). */
  private cgroupsPath(id: string): string {
    if (this.cgroup.version === 'v1') return `/hangar-sandboxes/${this.opts.installId}/${id}`;
    return `${this.cgroup.subtree}/sandboxes/${this.opts.installId}/${id}`;
  }

  /** Freezes or thaws through the cgroup; false when the container has no cgroup (left to runc). */
  private async freeze(id: string, frozen: boolean): Promise<boolean> {
    const dir = this.cgroupDir(id);
    const v1 = this.cgroup.version === 'v1';
    const [file, value] = v1 ? ['freezer.state', frozen ? 'FROZEN' : 'THAWED'] : ['cgroup.freeze', frozen ? '1' : '0'];
    try {
      await fs.writeFile(path.join(dir, file), value);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw new Error(`${frozen ? 'pausing' : 'resuming'} ${id}: ${(err as Error).message}`);
    }
    // The kernel freezes task by task; done when v1 says FROZEN / v2's cgroup.events says "frozen 1".
    const done = async () => {
      if (v1) return (await fs.readFile(path.join(dir, 'freezer.state'), 'utf8')).trim() === value;
      return /^frozen (\d)$/m.exec(await fs.readFile(path.join(dir, 'cgroup.events'), 'utf8'))?.[1] === value;
    };
    const deadline = Date.now() + 5_000;
    for (let wait = 0; !(await done()); wait = Math.min(wait + 1, 20)) {
      if (Date.now() > deadline) {
        // A task stuck in the kernel (e.g. uninterruptible I/O) keeps it freezing: leave the container running.
        if (frozen) await fs.writeFile(path.join(dir, file), v1 ? 'THAWED' : '0').catch(() => undefined);
        throw new Error(`${frozen ? 'pausing' : 'resuming'} ${id}: the cgroup did not ${frozen ? 'freeze' : 'thaw'} within 5 s`);
      }
      await new Promise((r) => setTimeout(r, wait));
    }
    return true;
  }

  async stop(id: string): Promise<void> {
    await this.teardown(id);
  }

  async destroy(id: string): Promise<void> {
    await this.teardown(id);
    await fs.rm(this.dirOf(id), { recursive: true, force: true });
  }

  async diskUsage(id: string): Promise<number | null> {
    const mnt = path.join(this.dirOf(id), 'upper');
    if (!(await isOwnFilesystem(mnt))) return null;
    const s = await fs.statfs(mnt).catch(() => null);
    return s ? (s.blocks - s.bfree) * s.bsize : null;
  }

  async saveLayer(containerId: string, templateId: string): Promise<Layer> {
    const dir = this.dirOf(containerId);
    await this.teardown(containerId, { keepDisk: true });
    if (!(await isOwnFilesystem(path.join(dir, 'upper')))) throw new Error(`the disk of ${containerId} is not mounted`);
    await this.removeLayer(templateId);
    const layerDir = path.join(this.installDir, 'layers', templateId);
    await fs.mkdir(layerDir, { recursive: true, mode: 0o755 });
    // cp -a keeps owners, modes, xattrs (overlay's opaque marks) and whiteouts (0/0 character devices).
    await execFileP('cp', ['-a', '--sparse=always', path.join(dir, 'upper/root'), path.join(dir, 'upper/usr'), layerDir], {
      maxBuffer: 16 * 1024 * 1024,
    });
    await this.destroy(containerId);
    return this.layerOf(templateId);
  }

  async list(): Promise<Map<string, ContainerStatus>> {
    const out = new Map<string, ContainerStatus>();
    const { stdout } = await execFileP(this.runc, ['--root', this.stateRoot, 'list', '--format', 'json']);
    const rows = (JSON.parse(stdout.trim() || 'null') ?? []) as { id: string; status: string; bundle?: string }[];
    // Replicas of one installation share its runc root when they share a host (ADR 0024): only the containers
    // whose bundle is in this node's sandbox folder are this node's.
    const mine = `${path.join(this.installDir, 'containers')}${path.sep}`;
    for (const row of rows) {
      if (row.bundle && !row.bundle.startsWith(mine)) continue;
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
    await fs.rm(this.socketDir, { recursive: true, force: true });
    // runc removes each container's cgroup; the installation's parent group stays (in every controller on v1).
    const { mount } = this.cgroup;
    if (this.cgroup.version === 'v2') {
      await fs.rmdir(path.join(mount, `${this.cgroup.subtree}/sandboxes`, this.opts.installId)).catch(() => undefined);
    } else {
      for (const controller of await fs.readdir(mount).catch(() => [] as string[])) {
        await fs.rmdir(path.join(mount, controller, 'hangar-sandboxes', this.opts.installId)).catch(() => undefined);
      }
    }
  }

  async close(): Promise<void> {
    for (const client of this.agents.values()) client.close();
    this.agents.clear();
  }

  /**
   * Kills and deletes the container (if any), unmounts its layers and its disk (detaching the loop device) and
   * removes its network; keeps its writable layer (the disk image).
   */
  private async teardown(id: string, opts: { keepDisk?: boolean } = {}): Promise<void> {
    this.agents.get(id)?.close();
    this.agents.delete(id);
    await execFileP(this.runc, ['--root', this.stateRoot, 'delete', '--force', id]).catch(() => undefined);
    const dir = this.dirOf(id);
    const rootfs = path.join(dir, 'rootfs');
    const targets = [path.join(rootfs, 'usr'), rootfs, ...(opts.keepDisk ? [] : [path.join(dir, 'upper')])];
    for (const target of targets) {
      if (await isMountPoint(target)) {
        await execFileP('umount', [target]).catch(() => execFileP('umount', ['-l', target]));
      }
    }
    if (!opts.keepDisk) await detachLoops(path.join(dir, 'disk.img'));
    await this.network?.detach(id);
    await fs.rm(path.join(this.socketDir, `${id}.sock`), { force: true });
  }

  /**
   * The container's disk: `<dir>/disk.img`, a sparse ext4 image of `diskMb` MiB made on first start, attached to
   * a loop device and mounted at `<dir>/upper`, which holds the writable layer (root/, usr/) and overlay's work
   * dirs (work/). Writing past its size is ENOSPC inside the sandbox and takes nothing more from the host. The
   * image persists, so a restart of Hangar or of the host mounts it again. A writable layer from before disk
   * images (files straight in `<dir>/upper`) moves into a new image on its next start.
   */
  private async mountDisk(dir: string, diskMb: number): Promise<void> {
    const img = path.join(dir, 'disk.img');
    const mnt = path.join(dir, 'upper');
    if (await isOwnFilesystem(mnt)) return;
    const legacy = path.join(dir, 'upper.legacy');
    await fs.mkdir(mnt, { recursive: true, mode: 0o755 });
    if (!(await exists(img)) && (await fs.readdir(mnt)).length > 0) {
      await fs.rename(mnt, legacy);
      await fs.mkdir(mnt, { mode: 0o755 });
    }
    // One shell for make + attach + mount: each process Hangar itself spawns costs ~10 ms, a third of the budget.
    await execFileP('sh', ['-ec', MOUNT_DISK, 'mount-disk', img, mnt, String(diskMb)]);
    if (await exists(legacy)) {
      await execFileP('cp', ['-a', '--sparse=always', `${legacy}/.`, `${mnt}/`]).catch(async (err: Error) => {
        await execFileP('umount', [mnt]).catch(() => undefined);
        await detachLoops(img);
        throw new Error(`its files no longer fit its ${diskMb} MiB disk: ${err.message}`);
      });
      await fs.rm(legacy, { recursive: true, force: true });
      await fs.rm(path.join(dir, 'work'), { recursive: true, force: true });
    }
  }

  /**
   * The sandbox user's passwd/group entries and home folder, written into a new writable layer before it is mounted.
   * The accounts are the layers' own (the host's base layer or the OS image at the bottom); the user's shell is bash
   * where the userland has one (Alpine's has only /bin/sh).
   */
  private async personalize(upperRoot: string, spec: ContainerSpec): Promise<void> {
    await fs.mkdir(path.join(upperRoot, 'etc'), { recursive: true, mode: 0o755 });
    // The accounts of the topmost layer that has them (a template's packages may have added system users).
    const roots = [...spec.layers.map((l) => l.root), spec.image?.root ?? this.baseRoot];
    const accounts = async (file: string) => {
      for (const root of roots) {
        const text = await fs.readFile(path.join(root, 'etc', file), 'utf8').catch(() => null);
        if (text !== null) return withNewline(text);
      }
      return '';
    };
    const passwd = await accounts('passwd');
    const group = await accounts('group');
    const bash = spec.image ? await exists(path.join(spec.image.usr, 'bin/bash')) : true;
    const shell = bash ? '/bin/bash' : '/bin/sh';
    await fs.writeFile(path.join(upperRoot, 'etc/passwd'), `${passwd}user:x:${spec.uid}:${spec.uid}:Sandbox user:/home/user:${shell}\n`);
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
      await overlay(
        path.join(dir, 'ovl/root'),
        [...spec.layers.map((l) => l.root), spec.image?.root ?? this.baseRoot],
        upper.root,
        path.join(dir, 'upper/work/root'),
        rootfs,
      );
    }
    const usr = path.join(rootfs, 'usr');
    if (!(await isMountPoint(usr))) {
      await overlay(
        path.join(dir, 'ovl/usr'),
        [...spec.layers.map((l) => l.usr), ...(spec.image ? [spec.image.usr] : [...this.baseUsr, '/usr'])],
        upper.usr,
        path.join(dir, 'upper/work/usr'),
        usr,
      );
    }
  }

  private ociConfig(spec: ContainerSpec, rootfs: string, netnsPath: string | null): object {
    // A build runs as root with Docker's capabilities, and so does its agent (root with CAP_SETUID could
    // become any uid anyway). A sandbox's agent runs as a uid of its own and starts commands as the user.
    const env: Record<string, string> = { ...spec.env };
    let user = { uid: spec.uid, gid: spec.uid, additionalGids: [] as number[] };
    let capabilities = { bounding: BUILD_CAPS, effective: BUILD_CAPS, permitted: BUILD_CAPS, inheritable: [] as string[], ambient: [] as string[] };
    if (!spec.build) {
      const agentUid = spec.uid + AGENT_UID_OFFSET;
      user = { uid: agentUid, gid: agentUid, additionalGids: [] };
      capabilities = { bounding: AGENT_CAPS, effective: AGENT_CAPS, permitted: AGENT_CAPS, inheritable: AGENT_CAPS, ambient: AGENT_CAPS };
      env.HANGAR_AGENT_UID = String(spec.uid);
      env.HANGAR_AGENT_GID = String(spec.uid);
    }
    return {
      ociVersion: '1.0.2',
      process: {
        terminal: false,
        user,
        args: ['/.hangar/agent'],
        env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
        cwd: '/',
        capabilities,
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
        // cgroupfs driver, also on systemd hosts: the subtree is Hangar's own (delegated), not systemd's (ADR 0020).
        // On v2 runc maps these to memory.max, memory.swap.max = swap - limit = 0 (no swap), cpu.max, pids.max and
        // an eBPF device filter.
        cgroupsPath: this.cgroupsPath(spec.id),
        resources: {
          devices: [{ allow: false, access: 'rwm' }],
          memory: { limit: spec.memoryMb * 1024 * 1024, swap: spec.memoryMb * 1024 * 1024 },
          cpu: { quota: Math.round(spec.cpu * 100_000), period: 100_000 },
          pids: { limit: spec.pids },
        },
        seccomp: SECCOMP,
        maskedPaths: [
          '/proc/acpi',
          '/proc/asound',
          '/proc/kcore',
          '/proc/keys',
          '/proc/latency_stats',
          '/proc/timer_list',
          '/proc/timer_stats',
          '/proc/sched_debug',
          '/sys/firmware',
          '/proc/scsi',
          '/sys/fs/cgroup',
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

function withNewline(text: string): string {
  return text === '' || text.endsWith('\n') ? text : `${text}\n`;
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

/** Whether `p` is the root of a filesystem other than its parent's (a mounted disk image), by device number. */
async function isOwnFilesystem(p: string): Promise<boolean> {
  const [self, parent] = await Promise.all([fs.stat(p).catch(() => null), fs.stat(path.dirname(p)).catch(() => null)]);
  return Boolean(self && parent && self.dev !== parent.dev);
}

/**
 * `sh -ec MOUNT_DISK mount-disk <img> <mountpoint> <MiB>`: makes the image if there is none (a sparse file with
 * an empty ext4 filesystem, under a temporary name so a crash never leaves half an image; lazy inode-table and
 * journal init keep mkfs at ~15 ms; the journal is kept for crash safety), else first detaches loop devices a
 * crash left on it; then attaches it (direct I/O: no second copy of its pages in the host's page cache) and
 * mounts it. `discard`: deleting files frees the image's blocks on the host; `noinit_itable`: no background
 * zeroing of inode tables (the sparse image already reads zeros there), which would take host space for nothing.
 */
const MOUNT_DISK = `
img=$1; mnt=$2; mb=$3
umask 077
if [ ! -e "$img" ]; then
  rm -f "$img.tmp"
  truncate -s "\${mb}M" "$img.tmp"
  mkfs.ext4 -q -F -m 0 -E lazy_itable_init=1,lazy_journal_init=1,nodiscard "$img.tmp"
  mv "$img.tmp" "$img"
else
  for d in $(losetup -j "$img" | cut -d: -f1); do losetup -d "$d" || true; done
fi
dev=$(losetup --find --show --direct-io=on "$img")
mount -t ext4 -o discard,noinit_itable,nosuid,nodev "$dev" "$mnt" || { losetup -d "$dev"; exit 1; }
`;

/** Detaches every loop device backed by `img` (after an unmount, or left by a crash between attach and mount). */
async function detachLoops(img: string): Promise<void> {
  const { stdout } = await execFileP('losetup', ['-j', img]).catch(() => ({ stdout: '' }));
  for (const line of stdout.split('\n')) {
    const dev = line.split(':')[0]?.trim();
    if (dev) await execFileP('losetup', ['-d', dev]).catch(() => undefined);
  }
}

async function exists(p: string): Promise<boolean> {
  return fs.access(p).then(
    () => true,
    () => false,
  );
}
