import fs from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import type { SandboxConfig } from '../../config.js';
import { errors } from '../http/errors.js';
import { RuncRuntime } from './runc.js';
import type { SandboxRuntime } from './types.js';

export type { Assignment, BaseInfo, ContainerSpec, ContainerStatus, Layer, OsImage, OsImageStore, SandboxRuntime } from './types.js';
export { KNOWN_OS, OS_DEFINITIONS, mirrorSetting } from './os-images.js';
export {
  AGENT_LIMITS,
  AgentClient,
  type AgentEntry,
  type AgentLimits,
  type AgentProcess,
  type OutputEvent,
  type StartProcess,
} from './agent-client.js';

export const AGENT_BINARY = fileURLToPath(new URL('../../../native/build/hangar-agent', import.meta.url));

/** A driver: builds the runtime for this installation or throws with the reason it cannot run here. */
type DriverFactory = (config: SandboxConfig, installId: string, log: Logger) => Promise<SandboxRuntime>;

/**
 * The sandbox drivers, by HANGAR_SANDBOX_DRIVER. A new driver (a Kubernetes one is designed in ADR 0025) is a
 * file implementing SandboxRuntime and a line here; the sandbox and template domains only see the interface.
 */
const DRIVERS: Readonly<Record<SandboxConfig['driver'], DriverFactory>> = {
  runc: (config, installId, log) =>
    RuncRuntime.create({
      dir: config.dir,
      installId,
      agentBinary: AGENT_BINARY,
      subnetOctet: config.subnetOctet,
      networkAllow: config.networkAllow,
      mirrors: config.mirrors,
      log,
    }),
};

/** The configured container runtime, or one that says why there is none (sandbox routes then answer 503 with the reason). */
export async function createSandboxRuntime(config: SandboxConfig, installId: string, log: Logger): Promise<SandboxRuntime> {
  try {
    return await DRIVERS[config.driver](config, installId, log);
  } catch (err) {
    const reason = (err as Error).message;
    log.warn({ reason, driver: config.driver }, 'persistent sandboxes are unavailable');
    return unavailableSandboxRuntime(reason);
  }
}

const MIB = 1024 * 1024;

/**
 * The free-space floor (HANGAR_SANDBOX_MIN_FREE_DISK_MB): refuses with 507 `insufficient_storage` while the
 * filesystem holding the sandboxes has less free than that, before a new sandbox, a resume or a build takes more.
 * Disk images are sparse (a sandbox takes host space as it writes), so the floor is what keeps the host from filling.
 */
export async function requireFreeDisk(config: SandboxConfig, what: string): Promise<void> {
  if (config.minFreeDiskMb === 0) return;
  const s = await fs.statfs(config.dir).catch(() => null);
  if (!s) return;
  const free = s.bavail * s.bsize;
  if (free >= config.minFreeDiskMb * MIB) return;
  throw errors.insufficientStorage(
    `${what}: the server's sandbox disk has ${Math.floor(free / MIB)} MiB free, below its floor of ${config.minFreeDiskMb} MiB ` +
      '(HANGAR_SANDBOX_MIN_FREE_DISK_MB); destroy sandboxes or templates you no longer need, or ask the operator for more space',
  );
}

export function unavailableSandboxRuntime(reason: string): SandboxRuntime {
  const fail = async (): Promise<never> => {
    throw errors.unavailable(`persistent sandboxes are unavailable on this server: ${reason}`);
  };
  return {
    available: false,
    unavailableReason: reason,
    networkReason: reason,
    base: { os: 'unknown', osName: 'unknown', description: `unavailable: ${reason}` },
    images: {
      probe: async () => reason,
      buildable: async () => reason,
      ensure: fail,
      find: async () => null,
    },
    start: fail,
    assign: fail,
    spareNetworks: async () => false,
    pause: fail,
    resume: fail,
    stop: fail,
    destroy: fail,
    diskUsage: async () => null,
    saveLayer: fail,
    list: async () => new Map(),
    agent: () => {
      throw errors.unavailable(`persistent sandboxes are unavailable on this server: ${reason}`);
    },
    layerOf: (id: string) => ({ root: `/nonexistent/${id}/root`, usr: `/nonexistent/${id}/usr` }),
    newLayer: fail,
    removeLayer: async () => undefined,
    removeInstallation: async () => undefined,
    close: async () => undefined,
  };
}
