import { generateKeyPairSync, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

/** What `hangar device link` saves: the server, the node's credential and the device's WireGuard key pair. */
export interface DeviceConfig {
  url: string;
  nodeId: string;
  deviceToken: string;
  meshAddress: string;
  organizationId: string;
  /** base64 of the raw 32-byte X25519 private key (WireGuard format). Never leaves this machine. */
  privateKey: string;
  publicKey: string;
  label: string;
}

/** `$HANGAR_DEVICE_CONFIG_DIR`, else `$XDG_CONFIG_HOME/hangar`, else `~/.config/hangar`. */
export function configDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.HANGAR_DEVICE_CONFIG_DIR) return path.resolve(env.HANGAR_DEVICE_CONFIG_DIR);
  if (env.XDG_CONFIG_HOME) return path.join(path.resolve(env.XDG_CONFIG_HOME), 'hangar');
  return path.join(os.homedir(), '.config', 'hangar');
}

export const configPath = (env: NodeJS.ProcessEnv = process.env): string => path.join(configDir(env), 'device.json');

/** The saved config, or null when this machine is not linked. A file that is not a config is an error. */
export async function readConfig(env: NodeJS.ProcessEnv = process.env): Promise<DeviceConfig | null> {
  const file = configPath(env);
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  const c = JSON.parse(text) as DeviceConfig;
  for (const k of ['url', 'nodeId', 'deviceToken', 'privateKey', 'publicKey'] as const) {
    if (typeof c[k] !== 'string' || !c[k]) throw new Error(`${file} is not a device config (no ${k})`);
  }
  return c;
}

/** Saves the config atomically and privately (`writePrivateJson`). */
export async function writeConfig(config: DeviceConfig, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  return writePrivateJson(configDir(env), 'device.json', config);
}

/**
 * Writes `value` as `<dir>/<name>` atomically and privately: the directory 0700, a temporary file created 0600
 * before any content is written, then renamed over the file (a reader sees the old file or the new one, never half
 * of one). For credentials the CLI keeps (the device link, `hangar login`).
 */
export async function writePrivateJson(dir: string, name: string, value: unknown): Promise<string> {
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  await fs.chmod(dir, 0o700);
  const file = path.join(dir, name);
  const tmp = path.join(dir, `.${name}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  const handle = await fs.open(tmp, 'wx', 0o600);
  try {
    await handle.chmod(0o600); // whatever the umask did
    await handle.writeFile(`${JSON.stringify(value, null, 2)}\n`);
    await handle.sync();
  } catch (err) {
    await handle.close();
    await fs.rm(tmp, { force: true });
    throw err;
  }
  await handle.close();
  try {
    await fs.rename(tmp, file);
  } catch (err) {
    await fs.rm(tmp, { force: true });
    throw err;
  }
  return file;
}

/** Forgets the link (the key pair goes with it: a new link makes a new one). */
export async function removeConfig(env: NodeJS.ProcessEnv = process.env): Promise<void> {
  await fs.rm(configPath(env), { force: true });
}

/** A new X25519 key pair in WireGuard's format: base64 of the raw 32-byte keys. */
export function generateKeyPair(): { privateKey: string; publicKey: string } {
  const { publicKey, privateKey } = generateKeyPairSync('x25519');
  const pub = publicKey.export({ format: 'der', type: 'spki' });
  const priv = privateKey.export({ format: 'der', type: 'pkcs8' });
  return { publicKey: pub.subarray(pub.length - 32).toString('base64'), privateKey: priv.subarray(priv.length - 32).toString('base64') };
}
