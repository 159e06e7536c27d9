import { existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ensureBaseLayer, hostOs } from './base-layer.js';

describe('the base layer (host userland under a generated root)', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'hangar-base-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('names the host OS truthfully', () => {
    expect(hostOs('ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')).toMatchObject({
      os: 'debian-12',
      osName: 'Debian GNU/Linux 12 (bookworm)',
    });
    expect(hostOs('ID=ubuntu\nVERSION_ID="24.04"\n').os).toBe('ubuntu-24.04');
    expect(hostOs('ID=arch\n').os).toBe('arch');
  });

  it('copies what apt and programs need from /etc, and none of the host’s secrets or people', async () => {
    const { root, info } = await ensureBaseLayer(dir);
    expect(info.os).toMatch(/^[a-z]+-?[0-9.]*$/);
    for (const secret of ['shadow', 'gshadow', 'sudoers', 'ssl/private', 'postgresql', 'redis', 'machine-id']) {
      if (secret === 'machine-id') expect(readFileSync(path.join(root, 'etc', secret), 'utf8')).toBe('');
      else expect(existsSync(path.join(root, 'etc', secret)), secret).toBe(false);
    }
    const passwd = readFileSync(path.join(root, 'etc/passwd'), 'utf8').trim().split('\n');
    expect(passwd.some((l) => l.startsWith('root:'))).toBe(true);
    expect(passwd.every((l) => Number(l.split(':')[2]) < 1000 || Number(l.split(':')[2]) === 65534)).toBe(true);
    expect(readFileSync(path.join(root, 'etc/resolv.conf'), 'utf8')).not.toMatch(/nameserver 127\./);
    expect(existsSync(path.join(root, 'etc/apt/sources.list')) || existsSync(path.join(root, 'etc/apt/sources.list.d'))).toBe(true);
    expect(existsSync(path.join(root, 'var/lib/dpkg/status'))).toBe(true);
    expect(readlinkSync(path.join(root, 'bin'))).toBe('usr/bin');
    expect(statSync(path.join(root, 'tmp')).mode & 0o7777).toBe(0o1777);
    expect(statSync(path.join(root, 'root')).mode & 0o777).toBe(0o700);
  });

  it('is made once per host userland: a second call finds the same tree', async () => {
    const a = await ensureBaseLayer(dir);
    const b = await ensureBaseLayer(dir);
    expect(b.root).toBe(a.root);
  });
});
