import { readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { ApiError, DeviceApi } from './api.js';
import { configPath, type DeviceConfig, generateKeyPair, readConfig, removeConfig, writeConfig } from './config.js';
import { RevokedError, runDevice } from './runner.js';

export const DEVICE_USAGE = `Usage: hangar device <command> [options]

Commands:
  link [--url URL] [--label NAME] [--force]       link this machine to a Hangar server (approve the code in a browser)
  run [--workspace DIR] [--endpoint HOST:PORT]... [--once]
                                                  take runs dispatched to this device and do them in DIR
  status [--json]                                 this device's node as the server sees it
  unlink [--force]                                revoke this device's credential and forget the link

The link is saved in device.json in $HANGAR_DEVICE_CONFIG_DIR, else $XDG_CONFIG_HOME/hangar, else ~/.config/hangar.
--url defaults to $HANGAR_URL, else http://127.0.0.1:8080.`;

/** A device command failed in a way the user can act on: printed without a stack trace, exit code 2. */
export class DeviceCliError extends Error {}

interface Io {
  env: NodeJS.ProcessEnv;
  out: (line: string) => void;
  err: (line: string) => void;
  /** Aborted on Ctrl-C / SIGTERM. */
  signal: AbortSignal;
}

function appVersion(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

const describeApiError = (err: unknown): never => {
  if (err instanceof ApiError) {
    if (err.status === 0) throw new DeviceCliError(err.message);
    throw new DeviceCliError(`the server answered ${err.status} ${err.code}: ${err.message}`);
  }
  throw err;
};

async function linked(io: Io): Promise<DeviceConfig> {
  const config = await readConfig(io.env);
  if (!config) throw new DeviceCliError(`this machine is not linked (no ${configPath(io.env)}): run \`hangar device link\` first`);
  return config;
}

interface LinkStart {
  code: string;
  url: string;
  expiresAt: string;
  pollSecret: string;
  interval: number;
}

type LinkPoll =
  | { status: 'pending' | 'slow_down'; interval?: number }
  | { status: 'approved'; nodeId: string; deviceToken: string; meshAddress: string; organizationId: string }
  | { status: 'completed' | 'expired' };

export async function link(io: Io, opts: { url?: string; label?: string; force?: boolean }): Promise<DeviceConfig> {
  const existing = await readConfig(io.env);
  if (existing && !opts.force)
    throw new DeviceCliError(
      `this machine is already linked (node ${existing.nodeId} on ${existing.url}). Run \`hangar device unlink\` first, or \`hangar device link --force\` to link it again.`,
    );
  const url = (opts.url ?? io.env.HANGAR_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
  try {
    new URL(url);
  } catch {
    throw new DeviceCliError(`--url: "${url}" is not a URL`);
  }
  const label = opts.label?.trim() || os.hostname();
  const keys = generateKeyPair();
  const api = new DeviceApi({ url });
  try {
    return await pollLink(io, api, { url, label, keys });
  } finally {
    await api.close();
  }
}

async function pollLink(
  io: Io,
  api: DeviceApi,
  { url, label, keys }: { url: string; label: string; keys: { privateKey: string; publicKey: string } },
) {
  const start = await api
    .call<LinkStart>(
      'POST',
      '/v1/runmesh/devices/link/start',
      { publicKey: keys.publicKey, deviceLabel: label, os: `${os.type()} ${os.release()} ${os.arch()}`, appVersion: appVersion() },
      io.signal,
    )
    .catch((err) => describeApiError(err));
  io.out(`Open ${start.url} and approve code ${start.code}`);
  io.out(`(the code expires at ${start.expiresAt}; Ctrl-C to give up)`);
  let interval = Math.max(1, Number(start.interval) || 5);
  for (;;) {
    try {
      await sleep(interval * 1000, undefined, { signal: io.signal });
    } catch {
      throw new DeviceCliError('link aborted; nothing was saved');
    }
    const poll = await api
      .call<LinkPoll>('POST', '/v1/runmesh/devices/link/poll', { code: start.code, pollSecret: start.pollSecret }, io.signal)
      .catch((err) => {
        if (io.signal.aborted) throw new DeviceCliError('link aborted; nothing was saved');
        return describeApiError(err);
      });
    if (poll.status === 'pending' || poll.status === 'slow_down') {
      if (typeof poll.interval === 'number' && poll.interval > 0) interval = poll.interval;
      else if (poll.status === 'slow_down') interval += 5; // RFC 8628 §3.5
      continue;
    }
    if (poll.status === 'expired') throw new DeviceCliError(`code ${start.code} expired before it was approved; run \`hangar device link\` again`);
    if (poll.status === 'completed')
      throw new DeviceCliError(`code ${start.code} was already collected by another poll; run \`hangar device link\` again`);
    if (poll.status !== 'approved') throw new DeviceCliError(`unexpected link status ${(poll as { status: string }).status}`);
    const config: DeviceConfig = {
      url,
      nodeId: poll.nodeId,
      deviceToken: poll.deviceToken,
      meshAddress: poll.meshAddress,
      organizationId: poll.organizationId,
      privateKey: keys.privateKey,
      publicKey: keys.publicKey,
      label,
    };
    const file = await writeConfig(config, io.env);
    io.out(`Linked as node ${config.nodeId} (mesh address ${config.meshAddress}, organization ${config.organizationId})`);
    io.out(`Saved to ${file}. Start taking runs with: hangar device run --workspace DIR`);
    return config;
  }
}

interface NodeView {
  id: string;
  name: string;
  status: 'active' | 'revoked';
  online: boolean;
  meshAddress: string;
  os: string | null;
  appVersion: string | null;
  lastSeenAt: string | null;
  ownerUserId: string;
  organizationId: string;
}

export async function status(io: Io, opts: { json?: boolean }): Promise<void> {
  const config = await linked(io);
  const api = new DeviceApi({ url: config.url, token: config.deviceToken });
  const node = await api
    .call<NodeView>('GET', '/v1/runmesh/device', undefined, io.signal)
    .finally(() => api.close())
    .catch((err) => {
      if (err instanceof ApiError && err.status === 401)
        throw new DeviceCliError(
          `the server no longer accepts this device's credential (node ${config.nodeId} was revoked?): run \`hangar device link --force\``,
        );
      return describeApiError(err);
    });
  if (opts.json) return io.out(JSON.stringify({ ...node, url: config.url, publicKey: config.publicKey }));
  io.out(`Node          ${node.id} (${node.name})`);
  io.out(`Server        ${config.url}`);
  io.out(`Status        ${node.status}${node.online ? ', online' : ', offline'}`);
  io.out(`Mesh address  ${node.meshAddress}`);
  io.out(`Organization  ${node.organizationId}`);
  io.out(`Owner         ${node.ownerUserId}`);
  io.out(`Last seen     ${node.lastSeenAt ?? 'never'}`);
  io.out(`Public key    ${config.publicKey}`);
}

export async function unlink(io: Io, opts: { force?: boolean }): Promise<void> {
  const config = await linked(io);
  const api = new DeviceApi({ url: config.url, token: config.deviceToken });
  try {
    await api.call('POST', '/v1/runmesh/device/unlink', {}, io.signal);
    io.out(`Revoked node ${config.nodeId} on ${config.url}`);
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) io.out(`Node ${config.nodeId} was already revoked on the server`);
    else if (opts.force) io.err(`warning: could not revoke on the server (${(err as Error).message}); forgetting the link anyway`);
    else {
      const why = err instanceof ApiError ? err.message : String(err);
      throw new DeviceCliError(
        `could not revoke the device on the server (${why}). Nothing was changed; \`hangar device unlink --force\` forgets it locally anyway.`,
      );
    }
  } finally {
    await api.close();
  }
  await removeConfig(io.env);
  io.out(`Removed ${configPath(io.env)}`);
}

export async function run(io: Io, opts: { workspace?: string; endpoint?: string[]; once?: boolean }): Promise<void> {
  const config = await linked(io);
  const workspace = path.resolve(opts.workspace ?? process.cwd());
  const st = await fs.stat(workspace).catch(() => null);
  if (!st?.isDirectory()) throw new DeviceCliError(`--workspace: ${workspace} is not an existing directory`);
  const endpoints = opts.endpoint ?? [];
  for (const e of endpoints) {
    if (!/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/.test(e) || Number(e.slice(e.lastIndexOf(':') + 1)) > 65535)
      throw new DeviceCliError(`--endpoint: "${e}" is not host:port`);
  }
  io.out(`Device ${config.nodeId} taking runs from ${config.url} in ${workspace} (one at a time; Ctrl-C to stop)`);
  try {
    await runDevice({
      config,
      workspace,
      endpoints,
      once: opts.once,
      signal: io.signal,
      log: (line) => io.out(`${new Date().toISOString()} ${line}`),
    });
  } catch (err) {
    if (err instanceof RevokedError) throw new DeviceCliError(err.message);
    throw err;
  }
  io.out('stopped');
}

/** `hangar device …`: parses its own options and runs the subcommand. */
export async function deviceCli(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const [sub, ...rest] = argv;
  const { values } = parseArgs({
    args: rest,
    options: {
      url: { type: 'string' },
      label: { type: 'string' },
      force: { type: 'boolean', default: false },
      workspace: { type: 'string' },
      endpoint: { type: 'string', multiple: true },
      once: { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (!sub || sub === 'help' || sub === '--help' || sub === '-h' || values.help) {
    console.log(DEVICE_USAGE);
    return;
  }
  const controller = new AbortController();
  const onSignal = () => controller.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const io: Io = { env, out: (l) => console.log(l), err: (l) => console.error(l), signal: controller.signal };
  try {
    switch (sub) {
      case 'link':
        await link(io, { url: values.url, label: values.label, force: values.force });
        return;
      case 'run':
        return await run(io, { workspace: values.workspace, endpoint: values.endpoint, once: values.once });
      case 'status':
        return await status(io, { json: values.json });
      case 'unlink':
        return await unlink(io, { force: values.force });
      default:
        throw new DeviceCliError(`unknown device command "${sub}"\n\n${DEVICE_USAGE}`);
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
