import { createHash, createPublicKey, type KeyObject, verify } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync, inflateRawSync } from 'node:zlib';

/**
 * Alpine's signed archives (apk v2), checked before anything from an Alpine mirror runs on the server (ADR 0022).
 *
 * An archive is gzip streams concatenated. The first is a tar holding `.SIGN.RSA.<key name>` (or `.SIGN.RSA256.`):
 * an RSA PKCS#1 v1.5 signature, SHA-1 (SHA-256), over the raw bytes of the stream after it. For a repository's
 * APKINDEX.tar.gz that is the index itself; for a package it is the control stream (`.PKGINFO`), whose `datahash`
 * is the SHA-256 of the remaining bytes (the data stream, the package's files). The index names each package's
 * control stream by `C:Q1<base64 SHA-1>`, so a package is tied to the signed index as well as signed itself.
 */

/** Alpine's signing keys for x86_64 (the files of the alpine-keys package), shipped with Hangar. */
export const ALPINE_KEYS_DIR = fileURLToPath(new URL('./alpine-keys/', import.meta.url));

/**
 * The shipped keys' SHA-256, as in aports' main/alpine-keys/APKBUILD: a key file that differs (edited, truncated,
 * replaced) is refused rather than trusted.
 */
export const ALPINE_KEY_SHA256: Readonly<Record<string, string>> = Object.freeze({
  'alpine-devel@lists.alpinelinux.org-4a6a0840.rsa.pub': '9c102bcc376af1498d549b77bdbfa815ae86faa1d2d82f040e616b18ef2df2d4',
  'alpine-devel@lists.alpinelinux.org-5261cecb.rsa.pub': '12f899e55a7691225603d6fb3324940fc51cd7f133e7ead788663c2b7eecb00c',
  'alpine-devel@lists.alpinelinux.org-6165ee59.rsa.pub': '207e4696d3c05f7cb05966aee557307151f1f00217af4143c1bcaf33b8df733f',
});

/** Trusted keys by file name (the name a signature entry names). */
export type ApkKeys = ReadonlyMap<string, KeyObject>;

/** A mirror's file that is not what a signed archive must be, or whose signature or hashes do not hold. */
export class ApkVerifyError extends Error {
  override name = 'ApkVerifyError';
}

const MAX_INDEX_BYTES = 32 * 1024 * 1024;
const MAX_PACKAGE_BYTES = 64 * 1024 * 1024;
/** Unpacked size of an index or a package's streams: a gzip bomb stops here. */
const MAX_UNPACKED_BYTES = 256 * 1024 * 1024;
const DOWNLOAD_TIMEOUT_MS = 120_000;
const KEY_NAME = /^[A-Za-z0-9@._+-]+\.rsa\.pub$/;
const ELF_MAGIC = Buffer.from([0x7f, 0x45, 0x4c, 0x46]);

/**
 * The `*.rsa.pub` keys of `dir`. With `pinned`, exactly those files, each with its pinned SHA-256 (the shipped
 * keys); a missing or different file fails.
 */
export async function loadApkKeys(dir: string, pinned?: Readonly<Record<string, string>>): Promise<ApkKeys> {
  const names = pinned ? Object.keys(pinned) : (await fs.readdir(dir)).filter((n) => KEY_NAME.test(n));
  const keys = new Map<string, KeyObject>();
  for (const name of names.sort()) {
    const pem = await fs.readFile(path.join(dir, name));
    const digest = createHash('sha256').update(pem).digest('hex');
    if (pinned && pinned[name] !== digest)
      throw new Error(`the Alpine signing key ${path.join(dir, name)} is not the one Hangar ships (SHA-256 ${digest})`);
    const key = createPublicKey(pem);
    if (key.asymmetricKeyType !== 'rsa') throw new Error(`${path.join(dir, name)} is not an RSA public key`);
    keys.set(name, key);
  }
  if (keys.size === 0) throw new Error(`no Alpine signing keys in ${dir}`);
  return keys;
}

/** The raw bytes of each gzip stream of `buf`, in order (each checked: it must unpack). */
export function gzipStreams(buf: Buffer): Buffer[] {
  const streams: Buffer[] = [];
  let at = 0;
  while (at < buf.length) {
    const start = at;
    if (buf.length - at < 18 || buf[at] !== 0x1f || buf[at + 1] !== 0x8b || buf[at + 2] !== 8) {
      throw new ApkVerifyError(`not a gzip stream at byte ${at}`);
    }
    const flags = buf[at + 3]!;
    at += 10;
    if (flags & 4) at += 2 + buf.readUInt16LE(at);
    if (flags & 8) at = buf.indexOf(0, at) + 1;
    if (flags & 16) at = buf.indexOf(0, at) + 1;
    if (flags & 2) at += 2;
    if (at <= start || at >= buf.length) throw new ApkVerifyError(`a truncated gzip header at byte ${start}`);
    // zlib stops at the end of the deflate data and says how much input that was; the 8-byte trailer follows.
    let consumed: number;
    try {
      const { engine } = inflateRawSync(buf.subarray(at), { info: true, maxOutputLength: MAX_UNPACKED_BYTES }) as unknown as {
        engine: { bytesWritten: number };
      };
      consumed = engine.bytesWritten;
    } catch (err) {
      throw new ApkVerifyError(`a damaged gzip stream at byte ${start} (${(err as Error).message})`);
    }
    at += consumed + 8;
    if (at > buf.length) throw new ApkVerifyError(`a truncated gzip stream at byte ${start}`);
    streams.push(buf.subarray(start, at));
  }
  return streams;
}

function gunzip(stream: Buffer): Buffer {
  try {
    return gunzipSync(stream, { maxOutputLength: MAX_UNPACKED_BYTES });
  } catch (err) {
    throw new ApkVerifyError(`a gzip stream does not unpack (${(err as Error).message})`);
  }
}

/**
 * The regular files of a tar (ustar with pax or GNU long names), by path. apk cuts the end-of-archive blocks off
 * its signature and control tars so they concatenate; the end of the buffer ends the archive too.
 */
export function readTar(tar: Buffer): Map<string, Buffer> {
  const files = new Map<string, Buffer>();
  let at = 0;
  let longName: string | null = null;
  while (at + 512 <= tar.length) {
    const header = tar.subarray(at, at + 512);
    if (header.every((b) => b === 0)) break;
    const field = (from: number, len: number) => {
      const raw = header.subarray(from, from + len);
      const end = raw.indexOf(0);
      return raw.subarray(0, end === -1 ? len : end).toString('utf8');
    };
    const stored = field(148, 8).trim();
    const sum = header.reduce((acc, b, i) => acc + (i >= 148 && i < 156 ? 32 : b), 0);
    if (Number.parseInt(stored, 8) !== sum) throw new ApkVerifyError(`a tar header at byte ${at} has a wrong checksum`);
    const size = Number.parseInt(field(124, 12).trim() || '0', 8);
    if (!Number.isSafeInteger(size) || size < 0) throw new ApkVerifyError(`a tar header at byte ${at} has a bad size`);
    const type = String.fromCharCode(header[156]!);
    const dataAt = at + 512;
    if (dataAt + size > tar.length) throw new ApkVerifyError(`a tar entry at byte ${at} runs past the end of the archive`);
    const data = tar.subarray(dataAt, dataAt + size);
    const prefix = field(345, 155);
    const name = longName ?? (prefix ? `${prefix}/${field(0, 100)}` : field(0, 100));
    if (type === 'x') longName = paxPath(data);
    else if (type === 'L') longName = data.toString('utf8').replace(/\0+$/, '');
    else {
      if (type === '0' || type === '\0') files.set(name.replace(/^\.\//, ''), data);
      longName = null;
    }
    at = dataAt + Math.ceil(size / 512) * 512;
  }
  return files;
}

/** The `path` record of a pax extended header, if any. */
function paxPath(data: Buffer): string | null {
  let at = 0;
  let found: string | null = null;
  while (at < data.length) {
    const space = data.indexOf(0x20, at);
    const len = Number.parseInt(data.subarray(at, space).toString('ascii'), 10);
    if (space === -1 || !Number.isSafeInteger(len) || len <= 0) break;
    const record = data.subarray(space + 1, at + len - 1).toString('utf8');
    const eq = record.indexOf('=');
    if (record.slice(0, eq) === 'path') found = record.slice(eq + 1);
    at += len;
  }
  return found;
}

/**
 * Checks the signature stream `sig` over `signed` with a trusted key: returns the key's name, or fails naming the
 * keys the archive was signed with when none of them is trusted or verifies.
 */
export function verifySignature(sig: Buffer, signed: Buffer, keys: ApkKeys, what: string): string {
  const entries = [...readTar(gunzip(sig))];
  const signatures = entries.flatMap(([name, value]) => {
    const m = name.match(/^\.SIGN\.(RSA|RSA256)\.(.+)$/);
    return m ? [{ hash: m[1] === 'RSA' ? 'sha1' : 'sha256', key: m[2]!, value }] : [];
  });
  if (signatures.length === 0 || signatures.length !== entries.length) throw new ApkVerifyError(`${what} is not signed (no .SIGN.RSA entry first)`);
  for (const s of signatures) {
    const key = keys.get(s.key);
    if (key && verify(s.hash, signed, key, s.value)) return s.key;
  }
  const names = signatures.map((s) => s.key).join(', ');
  if (signatures.some((s) => keys.has(s.key)))
    throw new ApkVerifyError(`${what} does not match its signature by ${names}: it was altered or damaged`);
  throw new ApkVerifyError(`${what} is signed by ${names}, which is not one of Alpine's keys this server trusts`);
}

export interface IndexedPackage {
  name: string;
  version: string;
  /** `Q1` + base64 SHA-1 of the package's control stream. */
  checksum: string;
}

/** Verifies a signed APKINDEX.tar.gz and returns its packages by name (the first entry of each name). */
export function verifyIndex(archive: Buffer, keys: ApkKeys, what = 'the APKINDEX'): Map<string, IndexedPackage> {
  const streams = gzipStreams(archive);
  if (streams.length < 2) throw new ApkVerifyError(`${what} is not a signed index (${streams.length} gzip stream)`);
  const signed = archive.subarray(streams[0]!.length);
  verifySignature(streams[0]!, signed, keys, what);
  const text = readTar(gunzip(signed)).get('APKINDEX');
  if (!text) throw new ApkVerifyError(`${what} holds no APKINDEX file`);
  const packages = new Map<string, IndexedPackage>();
  for (const block of text.toString('utf8').split(/\n\n+/)) {
    const fields = new Map(block.split('\n').map((line) => [line.slice(0, 1), line.slice(2)] as const));
    const name = fields.get('P');
    const version = fields.get('V');
    const checksum = fields.get('C');
    if (name && version && checksum && !packages.has(name)) packages.set(name, { name, version, checksum });
  }
  return packages;
}

/**
 * Verifies a package (.apk) against the trusted keys and its index entry: the control stream's signature, its
 * identity against the index's checksum, its name and version, and the data stream against `datahash`. Returns
 * the data stream's files.
 */
export function verifyPackage(archive: Buffer, keys: ApkKeys, expected: IndexedPackage): Map<string, Buffer> {
  const what = `${expected.name}-${expected.version}.apk`;
  const streams = gzipStreams(archive);
  if (streams.length < 3) throw new ApkVerifyError(`${what} is not a signed package (${streams.length} gzip streams)`);
  const [sig, control] = [streams[0]!, streams[1]!];
  verifySignature(sig, control, keys, what);
  const identity = `Q1${createHash('sha1').update(control).digest('base64')}`;
  if (identity !== expected.checksum)
    throw new ApkVerifyError(`${what} is not the package the signed index names (checksum ${identity}, index ${expected.checksum})`);
  const pkginfo = readTar(gunzip(control)).get('.PKGINFO');
  if (!pkginfo) throw new ApkVerifyError(`${what} has no .PKGINFO`);
  const info = new Map<string, string>();
  for (const line of pkginfo.toString('utf8').split('\n')) {
    const m = line.match(/^([a-z_]+) = (.*)$/);
    if (m && !info.has(m[1]!)) info.set(m[1]!, m[2]!);
  }
  if (info.get('pkgname') !== expected.name || info.get('pkgver') !== expected.version) {
    throw new ApkVerifyError(`${what} says it is ${info.get('pkgname')}-${info.get('pkgver')}`);
  }
  const data = archive.subarray(sig.length + control.length);
  const datahash = createHash('sha256').update(data).digest('hex');
  if (info.get('datahash') !== datahash) throw new ApkVerifyError(`${what}'s files do not match the datahash of its signed .PKGINFO`);
  return readTar(gunzip(data));
}

/** A download failed before any byte could be checked: the mirror, not the archive, is the problem. */
export class MirrorError extends Error {
  override name = 'MirrorError';
}

/** GETs `url` with a timeout, refusing more than `max` bytes. */
export async function download(url: string, max: number, timeoutMs = DOWNLOAD_TIMEOUT_MS): Promise<Buffer> {
  const signal = AbortSignal.timeout(timeoutMs);
  let res: Response;
  try {
    res = await fetch(url, { redirect: 'follow', signal });
  } catch (err) {
    throw new MirrorError(`${url} cannot be reached (${describe(err as Error, timeoutMs)})`);
  }
  if (!res.ok) {
    await res.body?.cancel().catch(() => undefined);
    throw new MirrorError(`${url} answered HTTP ${res.status}`);
  }
  const declared = Number(res.headers.get('content-length') ?? '0');
  if (declared > max) {
    await res.body?.cancel().catch(() => undefined);
    throw new MirrorError(`${url} is ${declared} bytes, more than the ${max} a file of this kind may be`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of res.body ?? []) {
      size += chunk.length;
      if (size > max) throw new MirrorError(`${url} is more than the ${max} bytes a file of this kind may be`);
      chunks.push(Buffer.from(chunk));
    }
  } catch (err) {
    if (err instanceof MirrorError) throw err;
    throw new MirrorError(`${url} stopped mid-download (${describe(err as Error, timeoutMs)})`);
  }
  return Buffer.concat(chunks);
}

function describe(err: Error, timeoutMs: number): string {
  if (err.name === 'TimeoutError' || err.name === 'AbortError') return `no complete answer within ${timeoutMs / 1000} s`;
  const cause = (err as Error & { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? err.message;
}

/**
 * Fetches `apk.static` from a repository (`<mirror>/<release>/main`) the verified way: the signed index, then the
 * apk-tools-static package it names, checked against both; writes the binary to `dest` (mode 0755) and returns
 * the package's version.
 */
export async function fetchApkStatic(
  repository: string,
  arch: string,
  keys: ApkKeys,
  dest: string,
  log: (line: string) => Promise<void>,
): Promise<string> {
  const base = `${repository.replace(/\/+$/, '')}/${arch}`;
  const indexUrl = `${base}/APKINDEX.tar.gz`;
  const index = verifyIndex(await download(indexUrl, MAX_INDEX_BYTES), keys, indexUrl);
  const pkg = index.get('apk-tools-static');
  if (!pkg) throw new ApkVerifyError(`${indexUrl} has no apk-tools-static package`);
  if (!/^[A-Za-z0-9._+-]+$/.test(pkg.version))
    throw new ApkVerifyError(`${indexUrl} gives apk-tools-static an odd version ${JSON.stringify(pkg.version)}`);
  await log(`==> ${indexUrl}: signature verified; apk-tools-static ${pkg.version}`);
  const url = `${base}/apk-tools-static-${pkg.version}.apk`;
  const files = verifyPackage(await download(url, MAX_PACKAGE_BYTES), keys, pkg);
  const binary = files.get('sbin/apk.static');
  if (!binary?.subarray(0, 4).equals(ELF_MAGIC)) throw new ApkVerifyError(`${url} holds no sbin/apk.static program`);
  await fs.writeFile(dest, binary, { mode: 0o755 });
  await fs.chmod(dest, 0o755);
  await log(`==> ${url}: signature, index checksum and datahash verified`);
  return pkg.version;
}
