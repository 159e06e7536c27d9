import { mkdtempSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseConfig } from './config.js';
import { rejection } from '../test/helpers.js';

const dir = () => mkdtempSync(path.join(tmpdir(), 'hangar-config-'));
const key = 'a'.repeat(64);
const errorOf = (fn: () => unknown): ConfigError => rejection(fn, ConfigError);

describe('configuration', () => {
  it('defaults to the embedded set-up: all services, SQLite under the data dir, port 8080', () => {
    const d = dir();
    const c = parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key });
    expect(c.services).toEqual(['orchestrator', 'auth', 'tools', 'billing', 'storage']);
    expect(c.database).toEqual({ kind: 'sqlite', file: path.join(d, 'hangar.db') });
    expect(c.port).toBe(8080);
    expect(c.host).toBe('127.0.0.1');
    expect(Object.isFrozen(c)).toBe(true);
  });

  it('names the setting in one line when something is wrong', () => {
    const d = dir();
    expect(errorOf(() => parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key }, { services: 'orchestrator,billingz' })).message).toMatch(
      /^--service: unknown service "billingz"/,
    );
    expect(errorOf(() => parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key, DATABASE_URL: 'mysql://x/y' })).setting).toBe('DATABASE_URL');
    expect(errorOf(() => parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key, DATABASE_URL: 'not a url' })).setting).toBe('DATABASE_URL');
    expect(errorOf(() => parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key, DATABASE_URL: 'postgres://host' })).setting).toBe('DATABASE_URL');
    expect(errorOf(() => parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key, PORT: 'eighty' })).setting).toBe('PORT');
    expect(errorOf(() => parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: 'short' })).setting).toBe('HANGAR_SECRET_KEY');
    expect(errorOf(() => parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key, HANGAR_OIDC_ISSUER: 'https://id.example' })).setting).toBe(
      'HANGAR_OIDC_ISSUER',
    );
    expect(errorOf(() => parseConfig({ HANGAR_DATA_DIR: '/etc/passwd/hangar', HANGAR_SECRET_KEY: key })).setting).toBe('HANGAR_DATA_DIR');
  });

  it('selects PostgreSQL from DATABASE_URL, with an optional schema', () => {
    const c = parseConfig({ HANGAR_DATA_DIR: dir(), HANGAR_SECRET_KEY: key, DATABASE_URL: 'postgres://u@db:5432/hangar?schema=tenant_a' });
    expect(c.database).toEqual({ kind: 'postgres', url: 'postgres://u@db:5432/hangar', schema: 'tenant_a' });
  });

  it('code execution limits: defaults from the machine, bounds checked, languages listed', () => {
    const d = dir();
    const c = parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key });
    expect(c.execute).toMatchObject({
      concurrency: availableParallelism(),
      queue: 4 * availableParallelism(),
      maxRunTimeoutMs: 30_000,
      languages: null,
    });
    expect(Object.isFrozen(c.execute)).toBe(true);
    const custom = parseConfig({
      HANGAR_DATA_DIR: d,
      HANGAR_SECRET_KEY: key,
      HANGAR_EXECUTE_CONCURRENCY: '3',
      HANGAR_EXECUTE_LANGUAGES: ' Python, go ,',
    });
    expect(custom.execute).toMatchObject({ concurrency: 3, queue: 12, languages: ['python', 'go'] });
    expect(errorOf(() => parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key, HANGAR_EXECUTE_CONCURRENCY: '0' })).setting).toBe(
      'HANGAR_EXECUTE_CONCURRENCY',
    );
    const tooBig = { HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key, HANGAR_EXECUTE_RUN_MEMORY_BYTES: String(4 * 1024 ** 3) };
    expect(errorOf(() => parseConfig(tooBig)).setting).toBe('HANGAR_EXECUTE_MAX_MEMORY_BYTES');
  });

  it('sandbox limits: defaults, server maxima checked against defaults, subnet and node id validated', () => {
    const d = dir();
    const c = parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key });
    expect(c.sandboxes).toMatchObject({
      dir: '/var/lib/hangar/sandboxes',
      maxRunningPerOrg: 10,
      defaultCpu: 1,
      maxCpu: 2,
      defaultMemoryMb: 512,
      subnetOctet: 89,
      prebuildTemplates: true,
    });
    expect(c.sandboxes.nodeId).toMatch(/^[A-Za-z0-9._-]{1,64}$/);
    const base = { HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key };
    expect(errorOf(() => parseConfig({ ...base, HANGAR_SANDBOX_DEFAULT_CPU: '4' })).setting).toBe('HANGAR_SANDBOX_MAX_CPU');
    expect(errorOf(() => parseConfig({ ...base, HANGAR_SANDBOX_DEFAULT_MEMORY_MB: '8192' })).setting).toBe('HANGAR_SANDBOX_MAX_MEMORY_MB');
    expect(errorOf(() => parseConfig({ ...base, HANGAR_SANDBOX_SUBNET: '192.168.0.0/16' })).setting).toBe('HANGAR_SANDBOX_SUBNET');
    expect(errorOf(() => parseConfig({ ...base, HANGAR_SANDBOX_SUBNET: '10.300.0.0/16' })).setting).toBe('HANGAR_SANDBOX_SUBNET');
    expect(errorOf(() => parseConfig({ ...base, HANGAR_NODE_ID: 'a b' })).setting).toBe('HANGAR_NODE_ID');
    // A CFS quota below 0.1 core (or one that rounds to 0, meaning no limit) is refused here as in requests.
    expect(errorOf(() => parseConfig({ ...base, HANGAR_SANDBOX_DEFAULT_CPU: '0.001' })).setting).toBe('HANGAR_SANDBOX_DEFAULT_CPU');
    expect(errorOf(() => parseConfig({ ...base, HANGAR_SANDBOX_MAX_CPU: '1e-9' })).setting).toBe('HANGAR_SANDBOX_MAX_CPU');
    expect(c.sandboxes).toMatchObject({ defaultDiskMb: 2048, maxDiskMb: 10_240, minFreeDiskMb: 2048, buildDiskMb: 4096 });
    expect(errorOf(() => parseConfig({ ...base, HANGAR_SANDBOX_DISK_MB: '20000' })).setting).toBe('HANGAR_SANDBOX_MAX_DISK_MB');
    expect(errorOf(() => parseConfig({ ...base, HANGAR_TEMPLATE_BUILD_DISK_MB: '10' })).setting).toBe('HANGAR_TEMPLATE_BUILD_DISK_MB');
    expect(parseConfig({ ...base, HANGAR_SANDBOX_SUBNET: '10.7.0.0/16', HANGAR_TEMPLATE_PREBUILD: 'false' }).sandboxes).toMatchObject({
      subnetOctet: 7,
      prebuildTemplates: false,
    });
  });

  it('HANGAR_SANDBOX_NETWORK_ALLOW: comma-separated IPv4/IPv6 networks, normalised; a bad one stops start-up naming the setting', () => {
    const base = { HANGAR_DATA_DIR: dir(), HANGAR_SECRET_KEY: key };
    expect(parseConfig(base).sandboxes.networkAllow).toEqual([]);
    const c = parseConfig({ ...base, HANGAR_SANDBOX_NETWORK_ALLOW: ' 10.0.5.0/24, 192.168.1.7 ,fd12:3456:0::/48,::ffff:10.0.0.0/104' });
    expect(c.sandboxes.networkAllow).toEqual(['10.0.5.0/24', '192.168.1.7/32', 'fd12:3456::/48', '::ffff:a00:0/104']);
    for (const [bad, message] of [
      ['10.0.5.1/24', /has host bits set; the network is 10\.0\.5\.0\/24/],
      ['10.0.5.0/33', /prefix length/],
      ['example.com', /not an IPv4 or IPv6 network/],
      ['10.0.0.0/8/1', /not a CIDR/],
      ['fd00::1/8', /host bits set; the network is fd00::\/8/],
      ['10.0.0.0/ 8', /prefix length/],
    ] as const) {
      const err = errorOf(() => parseConfig({ ...base, HANGAR_SANDBOX_NETWORK_ALLOW: `10.1.0.0/16,${bad}` }));
      expect(err.setting, bad).toBe('HANGAR_SANDBOX_NETWORK_ALLOW');
      expect(err.message, bad).toMatch(message);
      expect(err.message).toContain(`"${bad}"`);
    }
  });

  it('replicas: node URL, heartbeat, dead-after window and memory; a dead-after shorter than three heartbeats stops start-up', () => {
    const d = dir();
    const c = parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key });
    expect(c.nodes).toMatchObject({ url: null, heartbeatMs: 5000, deadAfterMs: 60_000 });
    expect(c.nodes.memoryMb).toBeGreaterThan(0);
    const set = parseConfig({
      HANGAR_DATA_DIR: d,
      HANGAR_SECRET_KEY: key,
      HANGAR_NODE_URL: 'http://10.0.0.7:8080/',
      HANGAR_NODE_HEARTBEAT_MS: '1000',
      HANGAR_NODE_DEAD_AFTER_MS: '3000',
      HANGAR_NODE_MEMORY_MB: '16384',
    });
    expect(set.nodes).toEqual({ url: 'http://10.0.0.7:8080', heartbeatMs: 1000, deadAfterMs: 3000, memoryMb: 16384 });
    expect(
      errorOf(() => parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key, HANGAR_NODE_HEARTBEAT_MS: '1000', HANGAR_NODE_DEAD_AFTER_MS: '2999' }))
        .setting,
    ).toBe('HANGAR_NODE_DEAD_AFTER_MS');
    expect(errorOf(() => parseConfig({ HANGAR_DATA_DIR: d, HANGAR_SECRET_KEY: key, HANGAR_NODE_URL: 'not a url' })).setting).toBe('HANGAR_NODE_URL');
  });

  it('warm pool: off by default; one size for both network modes unless HANGAR_SANDBOX_POOL_NETWORK says otherwise', () => {
    const base = { HANGAR_DATA_DIR: dir(), HANGAR_SECRET_KEY: key };
    expect(parseConfig(base).sandboxes.pool).toEqual({ size: 0, networkSize: 0, template: 'base-ubuntu', minFreeMemoryMb: 1024 });
    expect(parseConfig(base).sandboxes.spareNetworks).toBe(2);
    expect(parseConfig({ ...base, HANGAR_SANDBOX_POOL: '3' }).sandboxes.pool).toMatchObject({ size: 3, networkSize: 3 });
    expect(parseConfig({ ...base, HANGAR_SANDBOX_POOL: '3', HANGAR_SANDBOX_POOL_NETWORK: '0' }).sandboxes.pool).toMatchObject({
      size: 3,
      networkSize: 0,
    });
    expect(errorOf(() => parseConfig({ ...base, HANGAR_SANDBOX_POOL: '-1' })).setting).toBe('HANGAR_SANDBOX_POOL');
    expect(errorOf(() => parseConfig({ ...base, HANGAR_SANDBOX_POOL_TEMPLATE: 'Not A Slug' })).setting).toBe('HANGAR_SANDBOX_POOL_TEMPLATE');
  });

  it('package mirrors of OS images: defaults, trailing slashes dropped, a bad URL stops start-up naming the setting', () => {
    const base = { HANGAR_DATA_DIR: dir(), HANGAR_SECRET_KEY: key };
    expect(parseConfig(base).sandboxes.mirrors).toEqual({
      debian: 'http://deb.debian.org/debian',
      debianSecurity: 'http://deb.debian.org/debian-security',
      ubuntu: 'http://archive.ubuntu.com/ubuntu',
      alpine: 'https://dl-cdn.alpinelinux.org/alpine',
      ubuntuKeyring: '/usr/share/keyrings/ubuntu-archive-keyring.gpg',
    });
    expect(parseConfig({ ...base, HANGAR_MIRROR_DEBIAN: 'https://mirror.example.net/debian/' }).sandboxes.mirrors.debian).toBe(
      'https://mirror.example.net/debian',
    );
    for (const [setting, bad] of [
      ['HANGAR_MIRROR_DEBIAN', 'ftp://mirror.example.net/debian'],
      ['HANGAR_MIRROR_UBUNTU', 'http://mirror.example.net/ubuntu main'],
      ['HANGAR_MIRROR_ALPINE', 'https://user:secret@mirror.example.net/alpine'],
      ['HANGAR_MIRROR_DEBIAN_SECURITY', 'deb.debian.org/debian-security'],
      ['HANGAR_UBUNTU_KEYRING', 'keyrings/ubuntu.gpg'],
    ]) {
      expect(errorOf(() => parseConfig({ ...base, [setting]: bad })).setting, bad).toBe(setting);
    }
  });

  it('keeps a generated secret key in the data dir so restarts keep sessions valid', () => {
    const d = dir();
    const a = loadConfig({ HANGAR_DATA_DIR: d });
    const b = loadConfig({ HANGAR_DATA_DIR: d });
    expect(a.secretKey.length).toBe(32);
    expect(b.secretKey.equals(a.secretKey)).toBe(true);
    expect(loadConfig({ HANGAR_DATA_DIR: dir() }).secretKey.equals(a.secretKey)).toBe(false);
  });
});
