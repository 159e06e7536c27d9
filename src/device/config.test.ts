import { createPrivateKey, createPublicKey, diffieHellman } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { configDir, configPath, type DeviceConfig, generateKeyPair, readConfig, removeConfig, writeConfig } from './config.js';

const sample: DeviceConfig = {
  url: 'http://127.0.0.1:8080',
  nodeId: 'node_1',
  deviceToken: 'hgd_secret',
  meshAddress: '100.64.0.7',
  organizationId: 'org_1',
  privateKey: 'a',
  publicKey: 'b',
  label: 'laptop',
};

describe('device config', () => {
  let root: string;
  let env: NodeJS.ProcessEnv;
  beforeEach(async () => {
    root = await fs.mkdtemp(path.join(os.tmpdir(), 'hangar-devcfg-'));
    env = { HANGAR_DEVICE_CONFIG_DIR: path.join(root, 'cfg', 'hangar') };
  });
  afterEach(() => fs.rm(root, { recursive: true, force: true }));

  it('finds the directory from the environment', () => {
    expect(configDir({ HANGAR_DEVICE_CONFIG_DIR: '/x/y' })).toBe('/x/y');
    expect(configDir({ XDG_CONFIG_HOME: '/xdg' })).toBe('/xdg/hangar');
    expect(configDir({})).toBe(path.join(os.homedir(), '.config', 'hangar'));
  });

  it('writes the file 0600 in a 0700 directory and reads it back', async () => {
    expect(await readConfig(env)).toBeNull();
    const old = process.umask(0o022);
    try {
      await writeConfig(sample, env);
    } finally {
      process.umask(old);
    }
    expect((await fs.stat(configDir(env))).mode & 0o777).toBe(0o700);
    expect((await fs.stat(configPath(env))).mode & 0o777).toBe(0o600);
    expect(await readConfig(env)).toEqual(sample);
    await removeConfig(env);
    expect(await readConfig(env)).toBeNull();
  });

  it('replaces the file atomically, leaving no temporary file behind', async () => {
    await writeConfig(sample, env);
    const before = await fs.stat(configPath(env));
    await writeConfig({ ...sample, label: 'renamed' }, env);
    const after = await fs.stat(configPath(env));
    expect(after.ino).not.toBe(before.ino); // a new file renamed over the old one, not rewritten in place
    expect((await readConfig(env))?.label).toBe('renamed');
    expect(await fs.readdir(configDir(env))).toEqual(['device.json']);
    expect(after.mode & 0o777).toBe(0o600);
  });

  it('tightens an existing directory to 0700', async () => {
    await fs.mkdir(configDir(env), { recursive: true, mode: 0o755 });
    await writeConfig(sample, env);
    expect((await fs.stat(configDir(env))).mode & 0o777).toBe(0o700);
  });

  it('generates WireGuard keys: 32 raw bytes each, a working X25519 pair', () => {
    const a = generateKeyPair();
    const b = generateKeyPair();
    expect(Buffer.from(a.publicKey, 'base64')).toHaveLength(32);
    expect(Buffer.from(a.privateKey, 'base64')).toHaveLength(32);
    // Rebuild key objects from the raw bytes and check both sides agree on a shared secret.
    const spki = (raw: string) =>
      createPublicKey({
        key: Buffer.concat([Buffer.from('302a300506032b656e032100', 'hex'), Buffer.from(raw, 'base64')]),
        format: 'der',
        type: 'spki',
      });
    const pkcs8 = (raw: string) =>
      createPrivateKey({
        key: Buffer.concat([Buffer.from('302e020100300506032b656e04220420', 'hex'), Buffer.from(raw, 'base64')]),
        format: 'der',
        type: 'pkcs8',
      });
    const s1 = diffieHellman({ privateKey: pkcs8(a.privateKey), publicKey: spki(b.publicKey) });
    const s2 = diffieHellman({ privateKey: pkcs8(b.privateKey), publicKey: spki(a.publicKey) });
    expect(s1.equals(s2)).toBe(true);
  });
});
