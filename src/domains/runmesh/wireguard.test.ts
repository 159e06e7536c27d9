import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { itNeeding, wireguardNeed } from '../../../test/needs.js';
import {
  parseEndpoint,
  parseIpv4Address,
  parseMeshCidr,
  parseWireguardKey,
  randomMeshAddress,
  renderPeerConfig,
  WIREGUARD_KEY_PATTERN,
} from './wireguard.js';

const execFileAsync = promisify(execFile);

/** A real X25519 key pair, each key as WireGuard writes it (base64 of the raw 32 bytes). */
function keyPair(): { publicKey: string; privateKey: string } {
  const { publicKey, privateKey } = generateKeyPairSync('x25519');
  const spki = publicKey.export({ format: 'der', type: 'spki' });
  const pkcs8 = privateKey.export({ format: 'der', type: 'pkcs8' });
  return { publicKey: spki.subarray(spki.length - 32).toString('base64'), privateKey: pkcs8.subarray(pkcs8.length - 32).toString('base64') };
}

describe('parseWireguardKey', () => {
  it('accepts a real X25519 public and private key as WireGuard encodes them', () => {
    for (let i = 0; i < 20; i++) {
      const { publicKey, privateKey } = keyPair();
      expect(publicKey).toHaveLength(44);
      expect(parseWireguardKey(publicKey)).toBe(publicKey);
      expect(parseWireguardKey(privateKey)).toBe(privateKey);
      expect(WIREGUARD_KEY_PATTERN.test(publicKey)).toBe(true);
    }
  });

  it('rejects malformed keys', () => {
    const { publicKey } = keyPair();
    const bad = [
      '',
      publicKey.slice(0, 43), // missing padding
      `${publicKey.slice(0, 42)}=`, // 43 chars
      `${publicKey.slice(0, 43)}==`, // 45 chars
      `A${publicKey}`,
      Buffer.alloc(33, 7).toString('base64'), // 33 bytes
      Buffer.alloc(31, 7).toString('base64'), // 31 bytes
      Buffer.alloc(32).toString('base64'), // all zeros
      `${publicKey}\n`,
      `${publicKey}\nPostUp = rm -rf /`,
      ` ${publicKey}`,
      publicKey.replace(/[+/]/g, '-').replace(/^./, '-'), // base64url alphabet
      `${publicKey.slice(0, 40)} ${publicKey.slice(41)}`,
    ];
    for (const value of bad) expect(parseWireguardKey(value), JSON.stringify(value)).toBeNull();
  });

  it('rejects a non-canonical encoding (the spare low bits of the last character set)', () => {
    const canonical = Buffer.alloc(32, 1).toString('base64'); // ...AQE=
    expect(parseWireguardKey(canonical)).toBe(canonical);
    const last = canonical[42] as string;
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
    const sibling = alphabet[alphabet.indexOf(last) + 1] as string; // same 2 high bits, low bits non-zero
    const nonCanonical = `${canonical.slice(0, 42)}${sibling}=`;
    expect(Buffer.from(nonCanonical, 'base64')).toEqual(Buffer.from(canonical, 'base64'));
    expect(parseWireguardKey(nonCanonical)).toBeNull();
    expect(WIREGUARD_KEY_PATTERN.test(nonCanonical)).toBe(false);
  });
});

describe('parseMeshCidr', () => {
  it('parses IPv4 CIDRs with a prefix between /8 and /30', () => {
    expect(parseMeshCidr('100.64.0.0/10')).toEqual({ network: '100.64.0.0', prefix: 10, size: 4194304 });
    expect(parseMeshCidr('10.0.0.0/8')).toEqual({ network: '10.0.0.0', prefix: 8, size: 16777216 });
    expect(parseMeshCidr('192.168.7.4/30')).toEqual({ network: '192.168.7.4', prefix: 30, size: 4 });
  });

  it('throws a clear error otherwise', () => {
    expect(() => parseMeshCidr('100.64.0.0/7')).toThrow(/between \/8 and \/30/);
    expect(() => parseMeshCidr('10.0.0.0/31')).toThrow(/between \/8 and \/30/);
    expect(() => parseMeshCidr('10.0.0.0/32')).toThrow(/between \/8 and \/30/);
    expect(() => parseMeshCidr('fd00::/64')).toThrow(/not an IPv4 CIDR/);
    expect(() => parseMeshCidr('100.64.0.0')).toThrow(/not an IPv4 CIDR/);
    expect(() => parseMeshCidr('100.64.0/10')).toThrow(/not an IPv4 CIDR/);
    expect(() => parseMeshCidr('0x64.0.0.0/10')).toThrow(/not an IPv4 CIDR/);
    expect(() => parseMeshCidr('300.0.0.0/10')).toThrow(/not an IPv4 CIDR/);
    expect(() => parseMeshCidr('')).toThrow(/not an IPv4 CIDR/);
    expect(() => parseMeshCidr('100.64.0.1/10')).toThrow(/host bits set; did you mean 100\.64\.0\.0\/10\?/);
  });
});

describe('randomMeshAddress', () => {
  it('stays inside the range and never uses the network or broadcast address', () => {
    // A /30 has four addresses: .4 network, .5 and .6 hosts, .7 broadcast.
    expect(randomMeshAddress('192.168.7.4/30', () => 0)).toBe('192.168.7.5');
    expect(randomMeshAddress('192.168.7.4/30', (n) => n - 1)).toBe('192.168.7.6');
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) seen.add(randomMeshAddress('192.168.7.4/30'));
    expect([...seen].sort()).toEqual(['192.168.7.5', '192.168.7.6']);
  });

  it('covers the whole default block with the default random', () => {
    const network = 100 * 2 ** 24 + 64 * 2 ** 16;
    for (let i = 0; i < 500; i++) {
      const address = randomMeshAddress('100.64.0.0/10');
      expect(parseIpv4Address(address)).toBe(address);
      const n = address.split('.').reduce((acc, part) => acc * 256 + Number(part), 0);
      expect(n).toBeGreaterThan(network);
      expect(n).toBeLessThan(network + 2 ** 22 - 1);
    }
    expect(randomMeshAddress('100.64.0.0/10', (n) => n - 1)).toBe('100.127.255.254');
    expect(randomMeshAddress('100.64.0.0/10', () => 0)).toBe('100.64.0.1');
  });

  it('refuses a random function that leaves the range, and a bad CIDR', () => {
    expect(() => randomMeshAddress('192.168.7.4/30', (n) => n)).toThrow(/not an integer in \[0, 2\)/);
    expect(() => randomMeshAddress('192.168.7.4/30', () => -1)).toThrow();
    expect(() => randomMeshAddress('192.168.7.4/30', () => 0.5)).toThrow();
    expect(() => randomMeshAddress('nope')).toThrow(/not an IPv4 CIDR/);
  });
});

describe('parseEndpoint', () => {
  it('accepts IPv4, bracketed IPv6 and hostnames with a port, normalized', () => {
    expect(parseEndpoint('1.2.3.4:51820')).toBe('1.2.3.4:51820');
    expect(parseEndpoint('[2001:DB8:0:0::1]:51820')).toBe('[2001:db8::1]:51820');
    expect(parseEndpoint('[::1]:1')).toBe('[::1]:1');
    expect(parseEndpoint('Laptop.Example.COM:65535')).toBe('laptop.example.com:65535');
    expect(parseEndpoint('localhost:51820')).toBe('localhost:51820');
    expect(parseEndpoint('a-b.c9.io:443')).toBe('a-b.c9.io:443');
    expect(parseEndpoint(`${'a'.repeat(63)}.io:1`)).toBe(`${'a'.repeat(63)}.io:1`);
  });

  it('rejects everything else, injections first', () => {
    const bad = [
      '1.2.3.4:51820\nPostUp = rm -rf /',
      '1.2.3.4:51820\r\nPostUp = id',
      '1.2.3.4:51820 # hi',
      'host=evil:51820',
      'host#x:51820',
      ' 1.2.3.4:51820',
      '1.2.3.4:51820 ',
      '[::1]:0',
      '[::1]',
      '[fe80::1%eth0]:51820',
      '[::1\n]:51820',
      '::1:51820',
      'host:99999',
      'host:65536',
      'host:0',
      'host:',
      'host:0051',
      'host:-1',
      'host:+51',
      ':51820',
      '1.2.3.4',
      '1.2.3.256:51820',
      '01.2.3.4:51820',
      '1.2.3:51820',
      '0x7f.0.0.1:51820',
      '-host:51820',
      'host-:51820',
      'ho_st:51820',
      'a..b:51820',
      'host.:51820',
      `${'a'.repeat(64)}.io:51820`,
      `${Array.from({ length: 64 }, () => 'abc').join('.')}:1`, // 255 characters
      'hôst:51820',
      '',
    ];
    for (const value of bad) expect(parseEndpoint(value), JSON.stringify(value)).toBeNull();
  });
});

describe('renderPeerConfig', () => {
  it('renders the interface and one peer per valid peer, skipping an injected one', () => {
    const a = keyPair();
    const b = keyPair();
    const evil = keyPair();
    const config = renderPeerConfig({
      address: '100.64.0.2',
      peers: [
        { publicKey: a.publicKey, address: '100.64.0.3', endpoint: '[2001:db8::1]:51820' },
        { publicKey: evil.publicKey, address: '100.64.0.9', endpoint: '1.2.3.4:51820\nPostUp = rm -rf /' },
        { publicKey: `${evil.publicKey}\nPostUp = id`, address: '100.64.0.10', endpoint: null },
        { publicKey: evil.publicKey, address: '100.64.0.11/32\nPostUp = id', endpoint: null },
        { publicKey: b.publicKey, address: '100.64.0.4', endpoint: null },
        { publicKey: b.publicKey, address: '100.64.0.5', endpoint: null }, // repeated key
        { publicKey: evil.publicKey, address: '100.64.0.3', endpoint: null }, // repeated address
        { publicKey: evil.publicKey, address: '100.64.0.2', endpoint: null }, // the node's own address
      ],
    });
    expect(config).toBe(
      [
        '[Interface]',
        'Address = 100.64.0.2/32',
        '',
        '[Peer]',
        `PublicKey = ${a.publicKey}`,
        'AllowedIPs = 100.64.0.3/32',
        'Endpoint = [2001:db8::1]:51820',
        'PersistentKeepalive = 25',
        '',
        '[Peer]',
        `PublicKey = ${b.publicKey}`,
        'AllowedIPs = 100.64.0.4/32',
        'PersistentKeepalive = 25',
        '',
      ].join('\n'),
    );
    expect(config).not.toMatch(/PrivateKey|PostUp|#/);
    expect(config).not.toContain(evil.publicKey);
  });

  it('writes ListenPort and the keepalive given, and no peers when there are none', () => {
    expect(renderPeerConfig({ address: '10.0.0.1', peers: [], listenPort: 51820, keepaliveSeconds: 0 })).toBe(
      '[Interface]\nAddress = 10.0.0.1/32\nListenPort = 51820\n',
    );
    const { publicKey } = keyPair();
    expect(renderPeerConfig({ address: '10.0.0.1', peers: [{ publicKey, address: '10.0.0.2', endpoint: 'h:1' }], keepaliveSeconds: 10 })).toContain(
      'Endpoint = h:1\nPersistentKeepalive = 10\n',
    );
  });

  it('throws on an invalid interface address, listen port or keepalive', () => {
    expect(() => renderPeerConfig({ address: '100.64.0.2\nPostUp = id', peers: [] })).toThrow(/not an IPv4 address/);
    expect(() => renderPeerConfig({ address: '100.64.0.2/32', peers: [] })).toThrow(/not an IPv4 address/);
    expect(() => renderPeerConfig({ address: 'fd00::1', peers: [] })).toThrow(/not an IPv4 address/);
    expect(() => renderPeerConfig({ address: '10.0.0.1', peers: [], listenPort: 0 })).toThrow(/listenPort/);
    expect(() => renderPeerConfig({ address: '10.0.0.1', peers: [], listenPort: 1.5 })).toThrow(/listenPort/);
    expect(() => renderPeerConfig({ address: '10.0.0.1', peers: [], keepaliveSeconds: -1 })).toThrow(/keepaliveSeconds/);
  });

  itNeeding(wireguardNeed(), 'is a config wg-quick accepts once the device adds its PrivateKey', async () => {
    const self = keyPair();
    const peers = [
      { ...keyPair(), address: '100.64.0.3', endpoint: '[2001:db8::1]:51820' },
      { ...keyPair(), address: '100.64.0.4', endpoint: 'peer.example.com:51820' },
      { ...keyPair(), address: '100.64.0.5', endpoint: null },
    ];
    const config = renderPeerConfig({
      address: '100.64.0.2',
      listenPort: 51820,
      peers: [...peers, { publicKey: keyPair().publicKey, address: '100.64.0.6', endpoint: '1.2.3.4:51820\nPostUp = touch /tmp/pwned' }],
    });
    const withKey = config.replace('[Interface]\n', `[Interface]\nPrivateKey = ${self.privateKey}\n`);
    const dir = mkdtempSync(path.join(tmpdir(), 'hangar-wg-'));
    try {
      const file = path.join(dir, 'wg0.conf');
      writeFileSync(file, withKey, { mode: 0o600 });
      const { stdout } = await execFileAsync('wg-quick', ['strip', file]); // rejects on a non-zero exit
      expect(stdout).toContain(`PrivateKey = ${self.privateKey}`);
      expect(stdout).toContain('ListenPort = 51820');
      for (const peer of peers) {
        expect(stdout).toContain(`PublicKey = ${peer.publicKey}`);
        expect(stdout).toContain(`AllowedIPs = ${peer.address}/32`);
      }
      expect(stdout).not.toContain('Address =');
      expect(stdout).not.toContain('PostUp');
      expect(stdout.match(/\[Peer\]/g)).toHaveLength(peers.length);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
