import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import type { SandboxConfig } from '../../config.js';
import { errors } from '../http/errors.js';
import { RuncRuntime } from './runc.js';
import type { SandboxRuntime } from './types.js';

export type { BaseInfo, ContainerSpec, ContainerStatus, Layer, SandboxRuntime } from './types.js';
export { AgentClient, type AgentEntry, type AgentProcess, type OutputEvent, type StartProcess } from './agent-client.js';

export const AGENT_BINARY = fileURLToPath(new URL('../../../native/build/hangar-agent', import.meta.url));

/** The host's container runtime, or one that says why there is none (sandbox routes then answer 503 with the reason). */
export async function createSandboxRuntime(config: SandboxConfig, installId: string, log: Logger): Promise<SandboxRuntime> {
  try {
    return await RuncRuntime.create({ dir: config.dir, installId, agentBinary: AGENT_BINARY, subnetOctet: config.subnetOctet, networkAllow: config.networkAllow, log });
  } catch (err) {
    const reason = (err as Error).message;
    log.warn({ reason }, 'persistent sandboxes are unavailable');
    return unavailableSandboxRuntime(reason);
  }
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
    start: fail,
    pause: fail,
    resume: fail,
    stop: fail,
    destroy: fail,
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
