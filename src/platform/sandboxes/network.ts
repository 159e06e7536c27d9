import { execFile, spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { parseCidr } from '../../config.js';

const execFileP = promisify(execFile);

export const BRIDGE = 'hangar0';
/**
 * The bridge's MAC address, pinned. Left alone, a Linux bridge takes the lowest MAC of its ports, so it changed each
 * time a sandbox's veth with a lower one joined or left, and every running sandbox's ARP entry for its gateway went
 * stale: their traffic vanished for tens of seconds (CI saw DNS fail while other sandboxes came and went).
 * Locally administered (02:…), "hgr" in it.
 */
export const BRIDGE_MAC = '02:68:67:72:00:01';
const CLAIMS = '/run/hangar/net';
/** Namespaces made ahead (`spare-<pid>-<uuid>`, one empty file each), so a restart finds and removes those of a dead process. */
const SPARES = '/run/hangar/net-spares';
/** `<hash of a container id>` → the spare key whose namespace that container took. */
const LINKS = '/run/hangar/net-links';

/** Where a sandbox or build may never send traffic unless the operator allows it (HANGAR_SANDBOX_NETWORK_ALLOW). */
export const BLOCKED_V4 = [
  '0.0.0.0/8', // "this network"
  '10.0.0.0/8', // RFC 1918
  '100.64.0.0/10', // carrier-grade NAT, often a provider's internal network
  '127.0.0.0/8',
  '169.254.0.0/16', // link-local, cloud metadata services
  '172.16.0.0/12', // RFC 1918
  '192.0.0.0/24', // IETF protocol assignments
  '192.168.0.0/16', // RFC 1918
  '198.18.0.0/15', // benchmarking
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved, and the limited broadcast 255.255.255.255
];
export const BLOCKED_V6 = [
  '::/128',
  '::1/128',
  '::ffff:0:0/96', // IPv4-mapped: the IPv4 rules above in disguise
  '64:ff9b::/96', // NAT64 to IPv4 (could reach the ranges above)
  '64:ff9b:1::/48', // local-use NAT64
  'fc00::/7', // unique local
  'fe80::/10', // link-local
  'fec0::/10', // old site-local
  'ff00::/8', // multicast
];

export interface NetworkPolicy {
  /** The sandboxes' DNS resolvers (from the base layer's resolv.conf): reachable on port 53 even when private. */
  resolvers: readonly string[];
  /** Operator's allowlist of networks (normalised CIDRs) that are reachable although private. */
  allow: readonly string[];
}

/**
 * Networking for containers that ask for it: each gets its own network namespace with a veth pair on the
 * host bridge `hangar0` (10.N.0.1/16), an address of its own and a default route. nftables (ADR 0010) masquerades
 * their traffic out of the host, answers nothing they send to the host itself (any of its addresses: PostgreSQL,
 * Redis and Hangar stay out of reach), keeps them from each other (bridge ports are isolated too), and default-denies
 * every private, loopback, link-local, reserved and multicast range, IPv4 and IPv6, and the host's own networks
 * (its LAN): only the configured DNS resolvers (port 53) and the operator's allowlist are let through. Public
 * addresses stay reachable. Template builds use the same path, so the same rules apply to them.
 * A container without network gets runc's own empty namespace (loopback only).
 */
export class SandboxNetwork {
  /** Keys of namespaces made ahead by this process, ready to be taken (see spare). */
  private readonly spares: { key: string; ip: string }[] = [];

  private constructor(private readonly octet: number) {}

  /** Sets up the bridge, forwarding and the nftables table; idempotent. Throws with the reason when the host cannot. */
  static async setup(octet: number, policy: NetworkPolicy): Promise<SandboxNetwork> {
    const gateway = `10.${octet}.0.1`;
    const link = await execFileP('ip', ['-j', 'link', 'show', BRIDGE]).catch(() => null);
    if (!link) {
      await execFileP('ip', ['link', 'add', BRIDGE, 'type', 'bridge']).catch((err: Error) => {
        if (!/exists/i.test(String((err as { stderr?: string }).stderr ?? err.message))) throw err;
      });
    }
    const addr = await execFileP('ip', ['-4', '-o', 'addr', 'show', 'dev', BRIDGE]);
    if (!addr.stdout.includes(`${gateway}/16`)) await execFileP('ip', ['addr', 'add', `${gateway}/16`, 'dev', BRIDGE]).catch(() => undefined);
    const mac = await fs.readFile(`/sys/class/net/${BRIDGE}/address`, 'utf8').catch(() => '');
    if (mac.trim() !== BRIDGE_MAC) await execFileP('ip', ['link', 'set', BRIDGE, 'address', BRIDGE_MAC]);
    await execFileP('ip', ['link', 'set', BRIDGE, 'up']);
    await fs.writeFile('/proc/sys/net/ipv4/ip_forward', '1');
    await run('nft', ['-f', '-'], firewallRules(octet, { ...policy, lan: await hostNetworks() }));
    await fs.mkdir(CLAIMS, { recursive: true, mode: 0o700 });
    await fs.mkdir(SPARES, { recursive: true, mode: 0o700 });
    await fs.mkdir(LINKS, { recursive: true, mode: 0o700 });
    const network = new SandboxNetwork(octet);
    await network.sweepSpares();
    return network;
  }

  static netnsOf(id: string): string {
    return `hgr-${hash(id)}`;
  }

  /**
   * The container's namespace with its address and route, for the OCI config: one made ahead (spare) when there
   * is one, else made now.
   */
  async attach(id: string): Promise<{ netnsPath: string; ip: string }> {
    // A half-made namespace from a crash is redone from scratch.
    if ((await exists(path.join(LINKS, hash(id)))) || (await exists(`/run/netns/${SandboxNetwork.netnsOf(id)}`))) await this.detach(id);
    const spare = this.spares.shift();
    if (spare) {
      // The link first, then the address claim names the container (replaced whole by a rename, so no reader
      // sees it empty): at every moment the claim's owner leads to a live namespace (see namespaceAlive).
      await fs.writeFile(path.join(LINKS, hash(id)), spare.key, { mode: 0o600 });
      const claim = path.join(CLAIMS, spare.ip);
      await fs.writeFile(`${claim}.${process.pid}.tmp`, id, { mode: 0o600 });
      await fs.rename(`${claim}.${process.pid}.tmp`, claim);
      await fs.rm(path.join(SPARES, spare.key), { force: true });
      return { netnsPath: `/run/netns/${SandboxNetwork.netnsOf(spare.key)}`, ip: spare.ip };
    }
    return this.make(id);
  }

  /**
   * Keeps `count` namespaces made ahead by this process (one is made per call at most, so a caller on a timer
   * spreads the work); a count below what there is removes the extra ones. True when it made or removed any.
   */
  async spare(count: number): Promise<boolean> {
    if (this.spares.length > count) {
      while (this.spares.length > count) await this.remove(this.spares.pop()!.key);
      return true;
    }
    if (this.spares.length === count) return false;
    const key = `spare-${process.pid}-${randomUUID()}`;
    await fs.writeFile(path.join(SPARES, key), '', { mode: 0o600 });
    try {
      this.spares.push({ key, ip: (await this.make(key)).ip });
    } catch (err) {
      await fs.rm(path.join(SPARES, key), { force: true });
      throw err;
    }
    return true;
  }

  async detach(id: string): Promise<void> {
    const link = path.join(LINKS, hash(id));
    const key = await fs.readFile(link, 'utf8').catch(() => null);
    if (key) await this.remove(key);
    await fs.rm(link, { force: true });
    await this.remove(id);
  }

  /**
   * Two `ip -batch` calls (each process Hangar spawns costs milliseconds): on the host the namespace, the veth
   * pair with its inner end moved in, the outer end on the bridge (isolated port); inside, loopback, the address
   * and the default route.
   */
  private async make(owner: string): Promise<{ netnsPath: string; ip: string }> {
    const ns = SandboxNetwork.netnsOf(owner);
    const host = `hv${hash(owner).slice(0, 12)}`;
    const ip = await this.claimAddress(owner);
    try {
      await run(
        'ip',
        ['-batch', '-'],
        `netns add ${ns}\nlink add ${host} type veth peer name eth0 netns ${ns}\nlink set ${host} master ${BRIDGE}\n` +
          `link set dev ${host} type bridge_slave isolated on\nlink set ${host} up\n`,
      );
      await run(
        'ip',
        ['-n', ns, '-batch', '-'],
        `link set lo up\naddr add ${ip}/16 dev eth0\nlink set eth0 up\nroute add default via 10.${this.octet}.0.1\n`,
      );
    } catch (err) {
      await this.remove(owner);
      throw err;
    }
    return { netnsPath: `/run/netns/${ns}`, ip };
  }

  /** Removes the veth pair, namespace and address claim made for `owner` (a container id or a spare key). */
  private async remove(owner: string): Promise<void> {
    const ns = SandboxNetwork.netnsOf(owner);
    await execFileP('ip', ['link', 'del', `hv${hash(owner).slice(0, 12)}`]).catch(() => undefined);
    await execFileP('ip', ['netns', 'del', ns]).catch(() => undefined);
    for (const f of await fs.readdir(CLAIMS).catch(() => [] as string[])) {
      const claimant = await fs.readFile(path.join(CLAIMS, f), 'utf8').catch(() => '');
      if (claimant === owner) await fs.rm(path.join(CLAIMS, f), { force: true });
    }
    if (owner.startsWith('spare-')) await fs.rm(path.join(SPARES, owner), { force: true });
  }

  /** Namespaces made ahead by a process that is gone (Hangar restarted) are removed; those of live processes stay theirs. */
  private async sweepSpares(): Promise<void> {
    for (const key of await fs.readdir(SPARES).catch(() => [] as string[])) {
      const pid = Number(/^spare-(\d+)-/.exec(key)?.[1]);
      if (pid && processAlive(pid)) continue; // another app in a live process (tests run several in one) holds it
      await this.remove(key);
    }
  }

  /** An address unique on this host: claimed by creating `/run/hangar/net/<ip>`; a claim whose namespace is gone is stale and taken over. */
  private async claimAddress(id: string): Promise<string> {
    const start = parseInt(hash(id).slice(0, 8), 16) % 65000;
    for (let i = 0; i < 65000; i++) {
      const n = ((start + i) % 65000) + 2;
      const ip = `10.${this.octet}.${n >> 8}.${n & 255}`;
      if ((n & 255) === 0 || (n & 255) === 255) continue;
      const file = path.join(CLAIMS, ip);
      try {
        await fs.writeFile(file, id, { flag: 'wx' });
        return ip;
      } catch {
        const owner = await fs.readFile(file, 'utf8').catch(() => '');
        if (!owner || !(await namespaceAlive(owner))) {
          await fs.rm(file, { force: true });
          try {
            await fs.writeFile(file, id, { flag: 'wx' });
            return ip;
          } catch {
            /* lost the race: next address */
          }
        }
      }
    }
    throw new Error('no free sandbox network address');
  }
}

/**
 * The nftables table of one sandbox subnet (one per subnet, so installations with different subnets on one host
 * keep their own; a packet must pass every table, so the strictest rule of any of them holds). The table of
 * earlier versions (`inet hangar`, which blocked only loopback, link-local and the sandbox subnet) is removed.
 */
export function firewallRules(octet: number, policy: NetworkPolicy & { lan: readonly string[] }): string {
  const net = `10.${octet}.0.0/16`;
  const v4 = (list: readonly string[]) => list.filter((c) => !c.includes(':'));
  const v6 = (list: readonly string[]) => list.filter((c) => c.includes(':'));
  const set = (name: string, type: string, elements: readonly string[]) =>
    `  set ${name} {\n    type ${type}; flags interval; auto-merge\n${elements.length ? `    elements = { ${elements.join(', ')} }\n` : ''}  }`;
  const table = `hangar_${octet}`;
  return `
table inet hangar
delete table inet hangar
table inet ${table}
delete table inet ${table}
table inet ${table} {
${set('resolvers4', 'ipv4_addr', v4(policy.resolvers))}
${set('resolvers6', 'ipv6_addr', v6(policy.resolvers))}
${set('allow4', 'ipv4_addr', v4(policy.allow))}
${set('allow6', 'ipv6_addr', v6(policy.allow))}
${set('blocked4', 'ipv4_addr', [...BLOCKED_V4, ...v4(policy.lan)])}
${set('blocked6', 'ipv6_addr', [...BLOCKED_V6, ...v6(policy.lan)])}
  chain input {
    type filter hook input priority -10; policy accept;
    iifname "${BRIDGE}" ip daddr @resolvers4 meta l4proto { tcp, udp } th dport 53 accept
    iifname "${BRIDGE}" ip6 daddr @resolvers6 meta l4proto { tcp, udp } th dport 53 accept
    iifname "${BRIDGE}" drop
  }
  chain forward {
    type filter hook forward priority -10; policy accept;
    iifname "${BRIDGE}" oifname "${BRIDGE}" drop
    oifname "${BRIDGE}" ct state established,related accept
    oifname "${BRIDGE}" drop
    iifname "${BRIDGE}" ip saddr ${net} jump egress
    iifname "${BRIDGE}" meta nfproto ipv6 jump egress
  }
  chain egress {
    ip daddr @resolvers4 meta l4proto { tcp, udp } th dport 53 accept
    ip6 daddr @resolvers6 meta l4proto { tcp, udp } th dport 53 accept
    ip daddr @allow4 accept
    ip6 daddr @allow6 accept
    fib daddr type { local, broadcast, anycast, multicast } drop
    ip daddr @blocked4 drop
    ip6 daddr @blocked6 drop
  }
  chain postrouting {
    type nat hook postrouting priority 100; policy accept;
    ip saddr ${net} oifname != "${BRIDGE}" masquerade
  }
}
`;
}

/** The networks the host is directly attached to (its LANs), other than the sandbox bridge: not for sandboxes either. */
async function hostNetworks(): Promise<string[]> {
  const out: string[] = [];
  for (const family of ['-4', '-6']) {
    const { stdout } = await execFileP('ip', ['-j', family, 'route', 'show', 'table', 'main']).catch(() => ({ stdout: '[]' }));
    for (const r of JSON.parse(stdout || '[]') as { dst?: string; dev?: string; type?: string; gateway?: string }[]) {
      if (!r.dst || r.dst === 'default' || r.gateway || r.dev === BRIDGE || (r.type && r.type !== 'unicast')) continue;
      const parsed = parseCidr(r.dst.includes('/') ? r.dst : `${r.dst}/${family === '-4' ? 32 : 128}`);
      if ('cidr' in parsed && !parsed.cidr.endsWith('/0')) out.push(parsed.cidr);
    }
  }
  return [...new Set(out)];
}

/** Whether the namespace an address claim's owner uses still exists: its own, or the spare it took (its link). */
async function namespaceAlive(owner: string): Promise<boolean> {
  if (await exists(`/run/netns/${SandboxNetwork.netnsOf(owner)}`)) return true;
  const key = await fs.readFile(path.join(LINKS, hash(owner)), 'utf8').catch(() => null);
  return Boolean(key) && (await exists(`/run/netns/${SandboxNetwork.netnsOf(key!)}`));
}

async function exists(p: string): Promise<boolean> {
  return fs.access(p).then(
    () => true,
    () => false,
  );
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function hash(id: string): string {
  return createHash('sha256').update(id).digest('hex').slice(0, 13);
}

function run(cmd: string, args: string[], input: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['pipe', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${cmd} ${args.join(' ')}: ${stderr.trim() || `exit ${code}`}`))));
    child.stdin.end(input);
  });
}
