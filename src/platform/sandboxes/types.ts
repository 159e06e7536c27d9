/**
 * The contract between the sandbox and template domains and whatever runs containers on this host.
 * Today one implementation: OCI containers run by runc over overlay layers (runc.ts). A microVM or a
 * Kubernetes driver would implement the same interface.
 */
import type { AgentClient } from './agent-client.js';

/** A read-only layer: a root tree and a /usr tree, stacked in that order under a sandbox's own writable layer. */
export interface Layer {
  root: string;
  usr: string;
}

export interface ContainerSpec {
  /** Container id (the sandbox or build id); also names its folder. */
  id: string;
  /** Lower layers, topmost first; the base layer (host userland) is added below them by the runtime. */
  layers: Layer[];
  /** An OS image (ADR 0022) to stack the layers on in place of the host's userland; absent: the host's base layer. */
  image?: Layer | null;
  /** Host uid/gid the processes run as; 0 only for template builds. */
  uid: number;
  hostname: string;
  env: Record<string, string>;
  workdir: string;
  cpu: number;
  memoryMb: number;
  /** Size of the container's writable layer in MiB: a filesystem image of its own, so writing past it is ENOSPC inside. */
  diskMb: number;
  pids: number;
  network: boolean;
  /** Template builds run as root with a default set of capabilities (apt needs them); sandboxes never do. */
  build?: boolean;
}

/** What a warm (pooled) container is given when it becomes a tenant's sandbox (ADR 0023). */
export interface Assignment {
  /** The base environment of every command (replaces the neutral one it was started with). */
  env: Record<string, string>;
  /** A hostname other than the one it was started with, or undefined to keep it. */
  hostname?: string;
  /** Limits other than the ones it was started with, or undefined to keep them. */
  limits?: { cpu: number; memoryMb: number; pids: number };
}

export type ContainerStatus = 'running' | 'paused' | 'stopped';

export interface SandboxRuntime {
  readonly available: boolean;
  readonly unavailableReason: string | null;
  /** Whether containers can have a network (bridge + NAT); if not, why. */
  readonly networkReason: string | null;
  /** What the base layer is, for GET /v1/templates: the host's OS and how its userland is used. */
  readonly base: BaseInfo;
  /** OS images templates can be built on (ADR 0022). */
  readonly images: OsImageStore;
  /** Creates the writable layer if needed, mounts, and starts the container with its agent; resolves when the agent accepts requests. */
  start(spec: ContainerSpec): Promise<void>;
  /**
   * Gives a running container that no tenant has used (a pooled one) its tenant's environment, hostname and
   * limits. Resolves once all of it holds; on failure the container must not be used (destroy it).
   */
  assign(id: string, a: Assignment): Promise<void>;
  /**
   * Keeps `count` network namespaces (veth on the bridge, address, route) made ahead, so a start with network
   * takes one instead of making it; 0 removes them. Makes one at most per call (a caller on a timer spreads the
   * work); true when it made or removed one. A no-op without networking.
   */
  spareNetworks(count: number): Promise<boolean>;
  pause(id: string): Promise<void>;
  resume(id: string): Promise<void>;
  /** Stops the container and unmounts; the writable layer stays (files survive). */
  stop(id: string): Promise<void>;
  /** Stops and deletes everything of the container, writable layer included. */
  destroy(id: string): Promise<void>;
  /** Bytes in use on the container's disk while it is mounted (running or paused), else null. */
  diskUsage(id: string): Promise<number | null>;
  /**
   * Makes a (build) container's writable layer the template's layer: stops the container, copies its root and
   * /usr trees out of its disk image into the template's layer folder, then destroys the container.
   */
  saveLayer(containerId: string, templateId: string): Promise<Layer>;
  /** Every container of this installation that runc knows, with its status. */
  list(): Promise<Map<string, ContainerStatus>>;
  agent(id: string): AgentClient;
  /** Folder for a template's layer (created empty by `newLayer`). */
  layerOf(templateId: string): Layer;
  newLayer(templateId: string): Promise<Layer>;
  removeLayer(templateId: string): Promise<void>;
  /** Destroys every container and layer of this installation (uninstall; test clean-up). */
  removeInstallation(): Promise<void>;
  close(): Promise<void>;
}

export interface BaseInfo {
  os: string;
  osName: string;
  description: string;
}

/** A built OS image: a root tree and a /usr tree, with the id a template records. */
export interface OsImage extends Layer {
  /** `<os>-<mirror hash>/<generation>`. */
  id: string;
  os: string;
}

/** The node's OS images (src/platform/sandboxes/os-images.ts). */
export interface OsImageStore {
  /** null when the os's mirror answers, else why not; cached for a minute. */
  probe(os: string): Promise<string | null>;
  /** Whether images of `os` can be built here at all (null) or why not (a missing keyring, an os not built yet). */
  buildable(os: string): Promise<string | null>;
  /** The image new builds of `os` use, built first when there is none (an unreachable mirror fails it fast). */
  ensure(os: string, log: (line: string) => Promise<void>, signal?: AbortSignal): Promise<OsImage>;
  /** A built image by id, null once gone. */
  find(id: string): Promise<OsImage | null>;
}
