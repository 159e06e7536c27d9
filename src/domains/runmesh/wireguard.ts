import crypto from 'node:crypto';
import ipaddr from 'ipaddr.js';

/**
 * The pure WireGuard helpers of the device mesh (ADR 0029, "Nodes, addresses and peer configs"): key, CIDR,
 * address and endpoint validation, random mesh addresses, and the wg-quick peer config. No database, no Deps.
 *
 * Everything that ends up in a generated config passes one of the parse functions here, and renderPeerConfig
 * parses every value again itself: device-reported strings (keys, endpoints) are untrusted, and a config line
 * is a command channel (wg-quick runs PostUp/PreDown lines as root).
 */

/**
 * A WireGuard key as it may appear in a zod schema: 44 characters of standard base64 encoding 32 bytes (the
 * 43rd character carries only 2 significant bits, hence the restricted last class, then one `=`).
 * parseWireguardKey checks more (canonical encoding, not all zeros).
 */
export const WIREGUARD_KEY_PATTERN = /^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$/;

const ALL_ZERO_KEY = Buffer.alloc(32).toString('base64');

/**
 * A Curve25519 key (public or private) in WireGuard's encoding: standard base64 with padding of exactly 32
 * bytes. Returns the key when it is valid and canonical (decoding then re-encoding gives the same string),
 * else null. The all-zero key is rejected (it is no one's key, and a low-order point).
 */
export function parseWireguardKey(value: string): string | null {
  if (typeof value !== 'string' || !WIREGUARD_KEY_PATTERN.test(value)) return null;
  const bytes = Buffer.from(value, 'base64');
  if (bytes.length !== 32) return null;
  const canonical = bytes.toString('base64');
  if (canonical !== value || canonical === ALL_ZERO_KEY) return null;
  return canonical;
}

/** The smallest and largest prefix a mesh may use: /8 is plenty of nodes, /30 still has two hosts. */
const MIN_PREFIX = 8;
const MAX_PREFIX = 30;

// A dotted-quad IPv4 address, decimal, no leading zeros (ipaddr.js would also take hex, octal and short forms).
const IPV4_PATTERN = /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

/** A strict dotted-quad IPv4 address, returned normalized, or null. */
export function parseIpv4Address(value: string): string | null {
  if (typeof value !== 'string' || !IPV4_PATTERN.test(value)) return null;
  return ipaddr.IPv4.parse(value).toString();
}

function ipv4ToInt(address: string): number {
  return ipaddr.IPv4.parse(address)
    .toByteArray()
    .reduce((acc, byte) => acc * 256 + byte, 0);
}

function intToIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/**
 * The mesh's address block (`HANGAR_RUNMESH_CIDR`, default `100.64.0.0/10`): an IPv4 CIDR whose prefix is
 * between /8 and /30 and whose address is the block's network address (no host bits set). `size` is the number
 * of addresses in the block, network and broadcast included (2^(32-prefix)); usable host addresses are size - 2.
 * Throws an Error naming the problem otherwise.
 */
export function parseMeshCidr(cidr: string): { network: string; prefix: number; size: number } {
  const text = typeof cidr === 'string' ? cidr.trim() : '';
  const match = /^([0-9.]+)\/(\d{1,2})$/.exec(text);
  if (!match || !IPV4_PATTERN.test(match[1] as string)) {
    throw new Error(`mesh CIDR ${JSON.stringify(cidr)} is not an IPv4 CIDR like 100.64.0.0/10`);
  }
  let parsed: [ipaddr.IPv4 | ipaddr.IPv6, number];
  try {
    parsed = ipaddr.parseCIDR(text);
  } catch (err) {
    throw new Error(`mesh CIDR ${JSON.stringify(cidr)} is not an IPv4 CIDR like 100.64.0.0/10 (${(err as Error).message})`);
  }
  const [address, prefix] = parsed;
  if (address.kind() !== 'ipv4') throw new Error(`mesh CIDR ${JSON.stringify(cidr)} must be IPv4`);
  if (prefix < MIN_PREFIX || prefix > MAX_PREFIX) {
    throw new Error(`mesh CIDR ${JSON.stringify(cidr)} must have a prefix between /${MIN_PREFIX} and /${MAX_PREFIX}, not /${prefix}`);
  }
  const network = ipaddr.IPv4.networkAddressFromCIDR(text).toString();
  if (network !== address.toString()) {
    throw new Error(`mesh CIDR ${JSON.stringify(cidr)} has host bits set; did you mean ${network}/${prefix}?`);
  }
  return { network, prefix, size: 2 ** (32 - prefix) };
}

/**
 * A random host address inside `cidr` (parsed with parseMeshCidr, so it throws on a bad one): never the
 * network nor the broadcast address. `random(n)` must return an integer in [0, n), as crypto.randomInt does.
 * Uniqueness is the caller's: it inserts the address under a unique index and draws again on a collision.
 */
export function randomMeshAddress(cidr: string, random: (n: number) => number = crypto.randomInt): string {
  const { network, size } = parseMeshCidr(cidr);
  const hosts = size - 2;
  const pick = random(hosts);
  if (!Number.isInteger(pick) || pick < 0 || pick >= hosts) {
    throw new Error(`random(${hosts}) returned ${pick}, not an integer in [0, ${hosts})`);
  }
  return intToIpv4(ipv4ToInt(network) + 1 + pick);
}

const HOST_LABEL = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;
const PORT = /^[1-9]\d{0,4}$/;

function parseHostname(host: string): string | null {
  if (host.length === 0 || host.length > 253) return null;
  const labels = host.split('.');
  if (!labels.every((label) => HOST_LABEL.test(label))) return null;
  // An all-numeric last label is an IP address (or a malformed one), never a hostname: "1.2.3.999" is not a name.
  if (/^\d+$/.test(labels[labels.length - 1] as string)) return null;
  return host.toLowerCase();
}

function parseIpv6Literal(host: string): string | null {
  // Hex digits, colons and dots (an embedded IPv4) only: no zone index, nothing ipaddr.js might let through.
  if (!/^[0-9A-Fa-f:.]{2,45}$/.test(host) || !ipaddr.IPv6.isValid(host)) return null;
  return ipaddr.IPv6.parse(host).toString();
}

/**
 * A peer endpoint as a device reports it: `host:port`, host an IPv4 dotted quad, a bracketed IPv6 literal
 * (`[2001:db8::1]:51820`) or a DNS hostname (labels of letters, digits and '-', 1-63 characters, not starting
 * or ending with '-', at most 253 in all), port 1-65535. Returns it normalized (hostname lowercased, IPv6 in
 * its canonical short form, port without leading zeros), or null: anything else, including whitespace,
 * newlines, '#' or '=', never reaches a config.
 */
export function parseEndpoint(value: string): string | null {
  if (typeof value !== 'string' || value.length > 300) return null;
  let host: string | null;
  let port: string;
  const bracketed = /^\[([^\]]*)\]:([^:]*)$/.exec(value);
  if (bracketed) {
    host = parseIpv6Literal(bracketed[1] as string);
    port = bracketed[2] as string;
    if (host) host = `[${host}]`;
  } else {
    const colon = value.lastIndexOf(':');
    if (colon <= 0) return null;
    const rawHost = value.slice(0, colon);
    port = value.slice(colon + 1);
    if (rawHost.includes(':')) return null; // an unbracketed IPv6 literal is ambiguous
    host = parseIpv4Address(rawHost) ?? parseHostname(rawHost);
  }
  if (!host || !PORT.test(port)) return null;
  const portNumber = Number(port);
  if (portNumber < 1 || portNumber > 65535) return null;
  return `${host}:${portNumber}`;
}

export interface PeerConfigPeer {
  publicKey: string;
  address: string;
  endpoint: string | null;
}

export interface PeerConfigInput {
  /** The node's own mesh address (IPv4). */
  address: string;
  peers: PeerConfigPeer[];
  /** PersistentKeepalive of every peer, in seconds; default 25, 0 turns it off. */
  keepaliveSeconds?: number;
  /** The interface's ListenPort, when the device listens on a fixed one. */
  listenPort?: number;
}

const DEFAULT_KEEPALIVE_SECONDS = 25;

/**
 * The node's wg-quick config (`GET /v1/runmesh/nodes/{id}/config`): `[Interface]` with `Address = <ip>/32`
 * (and `ListenPort` when given), then one `[Peer]` per peer with `PublicKey`, `AllowedIPs = <its ip>/32`,
 * `Endpoint` when it has one, and `PersistentKeepalive`.
 *
 * There is NO `PrivateKey` line: the server never has the device's private key. The device inserts
 * `PrivateKey = <its key>` under `[Interface]` itself before handing the file to wg-quick.
 *
 * Every value is parsed again here (key, IPv4 address, endpoint) and only the parsed form is written. A peer
 * with any invalid value is skipped, never interpolated; so is a peer repeating an earlier peer's key or
 * address, or using the node's own address (wg would otherwise move the route to the later one). An invalid
 * interface address, listen port or keepalive throws (those are the server's own values). No names, labels
 * or comments appear anywhere: a comment line is still a line an attacker could shape.
 */
export function renderPeerConfig(input: PeerConfigInput): string {
  const address = parseIpv4Address(input.address);
  if (!address) throw new Error(`the node's mesh address ${JSON.stringify(input.address)} is not an IPv4 address`);
  const keepalive = input.keepaliveSeconds ?? DEFAULT_KEEPALIVE_SECONDS;
  if (!Number.isInteger(keepalive) || keepalive < 0 || keepalive > 65535) {
    throw new Error(`keepaliveSeconds ${keepalive} is not an integer between 0 and 65535`);
  }
  const listenPort = input.listenPort;
  if (listenPort !== undefined && (!Number.isInteger(listenPort) || listenPort < 1 || listenPort > 65535)) {
    throw new Error(`listenPort ${listenPort} is not an integer between 1 and 65535`);
  }

  const lines = ['[Interface]', `Address = ${address}/32`];
  if (listenPort !== undefined) lines.push(`ListenPort = ${listenPort}`);

  const seenKeys = new Set<string>();
  const seenAddresses = new Set<string>([address]);
  for (const peer of input.peers) {
    const publicKey = parseWireguardKey(peer.publicKey);
    const peerAddress = parseIpv4Address(peer.address);
    const endpoint = peer.endpoint === null ? null : parseEndpoint(peer.endpoint);
    if (!publicKey || !peerAddress || (peer.endpoint !== null && !endpoint)) continue;
    if (seenKeys.has(publicKey) || seenAddresses.has(peerAddress)) continue;
    seenKeys.add(publicKey);
    seenAddresses.add(peerAddress);
    lines.push('', '[Peer]', `PublicKey = ${publicKey}`, `AllowedIPs = ${peerAddress}/32`);
    if (endpoint) lines.push(`Endpoint = ${endpoint}`);
    lines.push(`PersistentKeepalive = ${keepalive}`);
  }
  return `${lines.join('\n')}\n`;
}
