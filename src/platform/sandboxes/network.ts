import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);

export const BRIDGE = 'hangar0';
const CLAIMS = '/run/hangar/net';

/**
 * Networking for containers that ask for it: each gets its own network namespace with a veth pair on the
 * host bridge `hangar0` (10.N.0.1/16), an address of its own and a default route; nftables masquerades
 * their traffic out of the host and drops everything they send to the host itself (any of its addresses:
 * PostgreSQL, Redis and Hangar stay out of reach), to loopback and link-local ranges, and to each other
 * (bridge ports are isolated too). A container without network gets runc's own empty namespace (loopback only).
 */
export class SandboxNetwork {
  private constructor(private readonly octet: number) {}

  /** Sets up the bridge, forwarding and the nftables table; idempotent. Throws with the reason when the host cannot. */
  static async setup(octet: number): Promise<SandboxNetwork> {
    const net = `10.${octet}.0.0/16`;
    const gateway = `10.${octet}.0.1`;
    const link = await execFileP('ip', ['-j', 'link', 'show', BRIDGE]).catch(() => null);
    if (!link) {
      await execFileP('ip', ['link', 'add', BRIDGE, 'type', 'bridge']).catch((err: Error) => {
        if (!/exists/i.test(String((err as { stderr?: string }).stderr ?? err.message))) throw err;
      });
    }
    const addr = await execFileP('ip', ['-4', '-o', 'addr', 'show', 'dev', BRIDGE]);
    if (!addr.stdout.includes(`${gateway}/16`)) await execFileP('ip', ['addr', 'add', `${gateway}/16`, 'dev', BRIDGE]).catch(() => undefined);
    await execFileP('ip', ['link', 'set', BRIDGE, 'up']);
    await fs.writeFile('/proc/sys/net/ipv4/ip_forward', '1');
    const rules = `
table inet hangar
delete table inet hangar
table inet hangar {
  chain input {
    type filter hook input priority -10; policy accept;
    iifname "${BRIDGE}" drop
  }
  chain forward {
    type filter hook forward priority -10; policy accept;
    iifname "${BRIDGE}" oifname "${BRIDGE}" drop
    iifname "${BRIDGE}" ip daddr { 127.0.0.0/8, 169.254.0.0/16, ${net} } drop
    oifname "${BRIDGE}" ct state established,related accept
    oifname "${BRIDGE}" drop
  }
  chain postrouting {
    type nat hook postrouting priority 100; policy accept;
    ip saddr ${net} oifname != "${BRIDGE}" masquerade
  }
}
`;
    await run('nft', ['-f', '-'], rules);
    await fs.mkdir(CLAIMS, { recursive: true, mode: 0o700 });
    return new SandboxNetwork(octet);
  }

  static netnsOf(id: string): string {
    return `hgr-${hash(id)}`;
  }

  /** Creates the container's namespace with its address and route; returns the namespace's path for the OCI config. */
  async attach(id: string): Promise<{ netnsPath: string; ip: string }> {
    const ns = SandboxNetwork.netnsOf(id);
    const host = `hv${hash(id).slice(0, 12)}`;
    await this.detach(id); // a half-made namespace from a crash is redone from scratch
    const ip = await this.claimAddress(id);
    try {
      await execFileP('ip', ['netns', 'add', ns]);
      await execFileP('ip', ['link', 'add', host, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
      await run('ip', ['-batch', '-'], `link set ${host} master ${BRIDGE}\nlink set dev ${host} type bridge_slave isolated on\nlink set ${host} up\n`);
      await run(
        'ip',
        ['-n', ns, '-batch', '-'],
        `link set lo up\naddr add ${ip}/16 dev eth0\nlink set eth0 up\nroute add default via 10.${this.octet}.0.1\n`,
      );
    } catch (err) {
      await this.detach(id);
      throw err;
    }
    return { netnsPath: `/run/netns/${ns}`, ip };
  }

  async detach(id: string): Promise<void> {
    const ns = SandboxNetwork.netnsOf(id);
    await execFileP('ip', ['link', 'del', `hv${hash(id).slice(0, 12)}`]).catch(() => undefined);
    await execFileP('ip', ['netns', 'del', ns]).catch(() => undefined);
    for (const f of await fs.readdir(CLAIMS).catch(() => [] as string[])) {
      const owner = await fs.readFile(path.join(CLAIMS, f), 'utf8').catch(() => '');
      if (owner === id) await fs.rm(path.join(CLAIMS, f), { force: true });
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
        const alive = owner && (await fs.access(`/run/netns/${SandboxNetwork.netnsOf(owner)}`).then(() => true, () => false));
        if (!alive) {
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
