import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildApp, closeDeps, createDeps } from '../../src/app.js';
import { parseConfig } from '../../src/config.js';
import { bootstrapOrganization } from '../../src/domains/organizations/index.js';
import type { Ctx, Deps } from '../../src/platform/context.js';
import type { App } from '../../src/platform/http/server.js';

/** The one user, organization and admin key every bench works as. */
export const BENCH_BOOTSTRAP = { email: 'bench@example.test', name: 'Bench', orgName: 'Bench Org', keyName: 'bench admin key' };

export interface InProcessHangar {
  deps: Deps;
  app: App;
  dataDir: string;
  url: string;
  apiKey: string;
  /** The admin's context, for calling service verbs directly. */
  ownerCtx: Ctx;
}

/**
 * Hangar built in this process as test/harness.ts does (embedded SQLite in a temp data dir, silent log, no
 * response validation, no template prebuild), with an organization and an admin key, listening on loopback.
 */
export async function startInProcessHangar(name: string, env: Record<string, string | undefined> = {}): Promise<InProcessHangar> {
  const dataDir = mkdtempSync(path.join(tmpdir(), `hangar-bench-${name}-`));
  let deps: Deps | undefined;
  try {
    const config = parseConfig({
      HANGAR_DATA_DIR: dataDir,
      LOG_LEVEL: 'silent',
      HANGAR_SECRET_KEY: randomBytes(32).toString('hex'),
      HOST: '127.0.0.1',
      PORT: '0',
      HANGAR_TEMPLATE_PREBUILD: 'false',
      ...env,
    });
    deps = await createDeps(config);
    const { key, adminCtx: ownerCtx } = await bootstrapOrganization(deps, BENCH_BOOTSTRAP);
    const app = await buildApp(deps);
    await app.listen({ host: '127.0.0.1', port: 0 });
    const port = (app.server.address() as AddressInfo).port;
    return { deps, app, dataDir, url: `http://127.0.0.1:${port}`, apiKey: key.key, ownerCtx };
  } catch (err) {
    if (deps) {
      await deps.sandboxes.removeInstallation().catch(() => undefined);
      await closeDeps(deps).catch(() => undefined);
    }
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
}

/** Closes it and removes everything it made: containers, layers, cgroups, the data dir. */
export async function stopInProcessHangar(h: InProcessHangar): Promise<void> {
  try {
    await h.app.close();
    await h.deps.sandboxes.removeInstallation();
    await closeDeps(h.deps);
  } finally {
    rmSync(h.dataDir, { recursive: true, force: true });
  }
}
