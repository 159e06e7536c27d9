import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Package, signatureStream, signedIndex, signedPackage, tar, testKey } from '../../../test/apk-archives.js';
import {
  ALPINE_KEY_SHA256,
  ALPINE_KEYS_DIR,
  type ApkKeys,
  ApkVerifyError,
  download,
  fetchApkStatic,
  gzipStreams,
  loadApkKeys,
  MirrorError,
  readTar,
  verifyIndex,
  verifyPackage,
} from './apk.js';

// The checks that stand between an Alpine mirror and apk.static running as root (ADR 0022), on archives made here in
// Alpine's real format and signed with a key pair made here. The bootstrap itself (apk.static installing
// alpine-base) is not run by any test: no Alpine mirror is reachable from the machines these tests run on.

const trusted = testKey('alpine-devel@lists.alpinelinux.org-test0001.rsa.pub');
const keys: ApkKeys = new Map([[trusted.name, trusted.publicKey]]);
const ELF = Buffer.concat([Buffer.from('\x7fELF', 'latin1'), Buffer.alloc(60, 1)]);

function apkTools(version = '2.14.4-r0', opts: { datahash?: string; binary?: Buffer } = {}): Package {
  return signedPackage('apk-tools-static', version, [{ name: 'sbin/apk.static', data: opts.binary ?? ELF }], trusted, opts);
}

function rejection(fn: () => unknown): Error {
  try {
    fn();
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a rejection');
}

describe('the shipped Alpine keys', () => {
  it('are the three x86_64 keys of alpine-keys, each matching its pinned SHA-256', async () => {
    const shipped = await loadApkKeys(ALPINE_KEYS_DIR, ALPINE_KEY_SHA256);
    expect([...shipped.keys()]).toEqual([
      'alpine-devel@lists.alpinelinux.org-4a6a0840.rsa.pub',
      'alpine-devel@lists.alpinelinux.org-5261cecb.rsa.pub',
      'alpine-devel@lists.alpinelinux.org-6165ee59.rsa.pub',
    ]);
    expect([...shipped.values()].map((k) => k.asymmetricKeyDetails?.modulusLength)).toEqual([2048, 2048, 4096]);
  });

  it('refuses a key file that differs from the one Hangar ships', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'apk-keys-'));
    try {
      for (const name of Object.keys(ALPINE_KEY_SHA256)) writeFileSync(path.join(dir, name), readFileSync(path.join(ALPINE_KEYS_DIR, name)));
      const name = 'alpine-devel@lists.alpinelinux.org-6165ee59.rsa.pub';
      writeFileSync(path.join(dir, name), trusted.publicKey.export({ type: 'spki', format: 'pem' }));
      await expect(loadApkKeys(dir, ALPINE_KEY_SHA256)).rejects.toThrow(`the Alpine signing key ${path.join(dir, name)} is not the one Hangar ships`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('reading apk archives', () => {
  it('splits concatenated gzip streams at their exact byte boundaries', () => {
    const a = gzipSync(Buffer.from('first'));
    const b = gzipSync(Buffer.alloc(100_000, 7));
    const streams = gzipStreams(Buffer.concat([a, b]));
    expect(streams.map((s) => s.length)).toEqual([a.length, b.length]);
    expect(rejection(() => gzipStreams(Buffer.concat([a, b.subarray(0, b.length - 3)])))).toBeInstanceOf(ApkVerifyError);
  });

  it('reads tars cut short (apk’s control) and tars made by GNU tar in pax format', () => {
    expect(
      readTar(tar([{ name: '.PKGINFO', data: 'pkgname = x\n' }], true))
        .get('.PKGINFO')
        ?.toString(),
    ).toBe('pkgname = x\n');
    const dir = mkdtempSync(path.join(os.tmpdir(), 'apk-tar-'));
    try {
      const long = `${'d'.repeat(120)}/apk.static`;
      execFileSync('mkdir', ['-p', path.join(dir, 'in', 'sbin'), path.join(dir, 'in', 'd'.repeat(120))]);
      writeFileSync(path.join(dir, 'in', 'sbin', 'apk.static'), ELF);
      writeFileSync(path.join(dir, 'in', long), 'long');
      execFileSync('tar', ['--format=posix', '-C', path.join(dir, 'in'), '-cf', path.join(dir, 'out.tar'), 'sbin', 'd'.repeat(120)]);
      const files = readTar(readFileSync(path.join(dir, 'out.tar')));
      expect(files.get('sbin/apk.static')).toEqual(ELF);
      expect(files.get(long)?.toString()).toBe('long');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('verifying a signed APKINDEX', () => {
  const pkg = apkTools();
  const entries = [
    { name: 'busybox', version: '1.36.1-r15', checksum: 'Q1AAAAAAAAAAAAAAAAAAAAAAAAAAA=' },
    { name: 'apk-tools-static', version: '2.14.4-r0', checksum: pkg.checksum },
  ];

  it('gives the packages of an index signed with a trusted key', () => {
    const index = verifyIndex(signedIndex(entries, trusted), keys);
    expect(index.get('apk-tools-static')).toEqual({ name: 'apk-tools-static', version: '2.14.4-r0', checksum: pkg.checksum });
    expect(index.get('busybox')?.version).toBe('1.36.1-r15');
  });

  it('refuses an index whose content was changed after signing', () => {
    const good = signedIndex(entries, trusted);
    const sig = gzipStreams(good)[0]!;
    const forged = signedIndex([{ ...entries[1]!, version: '9.9.9-r0' }], trusted);
    const tampered = Buffer.concat([sig, forged.subarray(gzipStreams(forged)[0]!.length)]);
    const err = rejection(() => verifyIndex(tampered, keys, 'the index'));
    expect(err).toBeInstanceOf(ApkVerifyError);
    expect(err.message).toBe(`the index does not match its signature by ${trusted.name}: it was altered or damaged`);
  });

  it('refuses an index signed with another key under a trusted key’s name', () => {
    const impostor = { ...testKey(), name: trusted.name };
    expect(rejection(() => verifyIndex(signedIndex(entries, impostor), keys, 'the index')).message).toBe(
      `the index does not match its signature by ${trusted.name}: it was altered or damaged`,
    );
  });

  it('refuses an index signed by a key it does not trust, naming it', () => {
    const stranger = testKey('someone@example.invalid-12345678.rsa.pub');
    expect(rejection(() => verifyIndex(signedIndex(entries, stranger), keys, 'the index')).message).toBe(
      "the index is signed by someone@example.invalid-12345678.rsa.pub, which is not one of Alpine's keys this server trusts",
    );
  });

  it('refuses an unsigned index', () => {
    const content = gzipSync(tar([{ name: 'APKINDEX', data: 'P:x\nV:1\nC:Q1x\n' }]));
    expect(rejection(() => verifyIndex(content, keys, 'the index')).message).toBe('the index is not a signed index (1 gzip stream)');
    const notSig = Buffer.concat([gzipSync(tar([{ name: 'README', data: 'hi' }], true)), content]);
    expect(rejection(() => verifyIndex(notSig, keys, 'the index')).message).toBe('the index is not signed (no .SIGN.RSA entry first)');
  });
});

describe('verifying a package', () => {
  const expected = (p: Package, version = '2.14.4-r0') => ({ name: 'apk-tools-static', version, checksum: p.checksum });

  it('gives the files of a package signed with a trusted key, whose control and data match', () => {
    const p = apkTools();
    expect(verifyPackage(p.archive, keys, expected(p)).get('sbin/apk.static')).toEqual(ELF);
  });

  it('refuses a package whose files are not the ones its signed .PKGINFO hashes', () => {
    const p = apkTools();
    const other = apkTools('2.14.4-r0', { binary: Buffer.concat([ELF, Buffer.from('evil')]) });
    const swapped = Buffer.concat([p.archive.subarray(0, p.archive.length - p.data.length), other.data]);
    expect(rejection(() => verifyPackage(swapped, keys, expected(p))).message).toBe(
      "apk-tools-static-2.14.4-r0.apk's files do not match the datahash of its signed .PKGINFO",
    );
    const wrongHash = apkTools('2.14.4-r0', { datahash: 'ab'.repeat(32) });
    expect(rejection(() => verifyPackage(wrongHash.archive, keys, expected(wrongHash))).message).toContain('do not match the datahash');
  });

  it('refuses a validly signed package that is not the one the index names', () => {
    const older = apkTools('2.14.0-r0');
    const current = apkTools();
    const err = rejection(() => verifyPackage(older.archive, keys, expected(current)));
    expect(err.message).toContain('is not the package the signed index names');
  });

  it('refuses a package whose control stream was altered, and one signed by an unknown key', () => {
    const p = apkTools();
    const [sig] = gzipStreams(p.archive);
    const control = gzipSync(tar([{ name: '.PKGINFO', data: 'pkgname = apk-tools-static\npkgver = 2.14.4-r0\ndatahash = 00\n' }], true));
    const altered = Buffer.concat([sig!, control, p.data]);
    expect(rejection(() => verifyPackage(altered, keys, expected(p))).message).toContain('does not match its signature');
    const stranger = signedPackage('apk-tools-static', '2.14.4-r0', [{ name: 'sbin/apk.static', data: ELF }], testKey('x@y-1.rsa.pub'));
    expect(rejection(() => verifyPackage(stranger.archive, keys, expected(stranger))).message).toContain(
      "is signed by x@y-1.rsa.pub, which is not one of Alpine's keys",
    );
  });

  it('refuses a package whose signature stream signs something else', () => {
    const p = apkTools();
    const resigned = Buffer.concat([signatureStream(Buffer.from('other bytes'), trusted), p.control, p.data]);
    expect(rejection(() => verifyPackage(resigned, keys, expected(p))).message).toContain('does not match its signature');
  });
});

describe('fetching apk.static from a mirror', () => {
  let server: http.Server;
  let base: string;
  const routes = new Map<string, Buffer | 'hang' | 'chunked'>();
  let dir: string;

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      const body = routes.get(req.url ?? '');
      if (body === 'hang') return; // never answers
      if (!body) return void res.writeHead(404).end();
      if (body === 'chunked') {
        // No length announced: the cap applies while reading.
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        res.write(Buffer.alloc(8));
        return void res.end(Buffer.alloc(8));
      }
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length }).end(body);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    dir = mkdtempSync(path.join(os.tmpdir(), 'apk-fetch-'));
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  it('takes the version from the signed index, and writes the verified binary executable', async () => {
    const p = apkTools('2.14.4-r0');
    routes.set(
      '/alpine/v3.19/main/x86_64/APKINDEX.tar.gz',
      signedIndex([{ name: 'apk-tools-static', version: '2.14.4-r0', checksum: p.checksum }], trusted),
    );
    routes.set('/alpine/v3.19/main/x86_64/apk-tools-static-2.14.4-r0.apk', p.archive);
    const lines: string[] = [];
    const dest = path.join(dir, 'apk.static');
    const version = await fetchApkStatic(`${base}/alpine/v3.19/main/`, 'x86_64', keys, dest, async (l) => void lines.push(l));
    expect(version).toBe('2.14.4-r0');
    expect(readFileSync(dest)).toEqual(ELF);
    expect(statSync(dest).mode & 0o777).toBe(0o755);
    expect(lines).toEqual([
      `==> ${base}/alpine/v3.19/main/x86_64/APKINDEX.tar.gz: signature verified; apk-tools-static 2.14.4-r0`,
      `==> ${base}/alpine/v3.19/main/x86_64/apk-tools-static-2.14.4-r0.apk: signature, index checksum and datahash verified`,
    ]);
  });

  it('writes nothing when the package does not verify', async () => {
    const p = apkTools('2.14.5-r0');
    const other = apkTools('2.14.5-r0', { binary: Buffer.concat([ELF, Buffer.from('x')]) });
    routes.set(
      '/bad/v3.19/main/x86_64/APKINDEX.tar.gz',
      signedIndex([{ name: 'apk-tools-static', version: '2.14.5-r0', checksum: p.checksum }], trusted),
    );
    routes.set('/bad/v3.19/main/x86_64/apk-tools-static-2.14.5-r0.apk', other.archive);
    const dest = path.join(dir, 'never');
    await expect(fetchApkStatic(`${base}/bad/v3.19/main`, 'x86_64', keys, dest, async () => undefined)).rejects.toBeInstanceOf(ApkVerifyError);
    expect(() => statSync(dest)).toThrow();
  });

  it('says which file of the mirror failed, and caps size and time', async () => {
    await expect(fetchApkStatic(`${base}/none/v3.19/main`, 'x86_64', keys, path.join(dir, 'x'), async () => undefined)).rejects.toThrow(
      new MirrorError(`${base}/none/v3.19/main/x86_64/APKINDEX.tar.gz answered HTTP 404`),
    );
    routes.set('/big', Buffer.alloc(100));
    await expect(download(`${base}/big`, 10)).rejects.toThrow(`${base}/big is 100 bytes, more than the 10 a file of this kind may be`);
    routes.set('/chunked', 'chunked');
    await expect(download(`${base}/chunked`, 10)).rejects.toThrow(`${base}/chunked is more than the 10 bytes a file of this kind may be`);
    routes.set('/slow', 'hang');
    await expect(download(`${base}/slow`, 10, 300)).rejects.toThrow(`${base}/slow cannot be reached (no complete answer within 0.3 s)`);
  });
});
