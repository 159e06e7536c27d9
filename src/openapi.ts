import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildApp, closeDeps, createDeps } from './app.js';
import { parseConfig } from './config.js';

/** The OpenAPI document of every service, as committed in docs/openapi.json (servers: the embedded default). */
export async function generateOpenApi(): Promise<Record<string, unknown>> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'hangar-openapi-'));
  const deps = await createDeps(
    parseConfig({ HANGAR_DATA_DIR: dataDir, LOG_LEVEL: 'silent', HANGAR_SECRET_KEY: randomBytes(32).toString('hex') }),
    { isolation: false }, // documenting routes runs no code
  );
  try {
    const app = await buildApp(deps);
    const doc = structuredClone(app.swagger()) as unknown as Record<string, unknown>;
    doc.servers = [{ url: 'http://127.0.0.1:8080', description: 'embedded default (npm start)' }];
    await app.close();
    return doc;
  } finally {
    await closeDeps(deps);
    rmSync(dataDir, { recursive: true, force: true });
  }
}
