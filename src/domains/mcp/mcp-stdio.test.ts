import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, type Actor, type Harness } from '../../../test/harness.js';
import { isolationNeed, itNeeding } from '../../../test/needs.js';

/** `hangar mcp` as an MCP host runs it: a child process speaking MCP on stdio, bridged to the server's /v1/mcp. */

const BIN = path.resolve(import.meta.dirname, '../../../bin/hangar.js');
const h: Harness = await createHarness();
let url: string;
let a: Actor;
let dir: string;
let configDir: string;
const clients: Client[] = [];

const baseEnv = () => ({ PATH: process.env.PATH ?? '', HOME: dir, HANGAR_CONFIG_DIR: configDir });

const hangar = (args: string[], env: Record<string, string> = {}) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    const child = execFile(
      process.execPath,
      [BIN, ...args],
      { env: { ...baseEnv(), ...env }, encoding: 'utf8', timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin?.end('');
  });

/** Starts `hangar mcp` through the SDK's stdio client, as Claude Desktop-style hosts do; its stderr is collected. */
async function spawnMcp(args: string[] = [], env: Record<string, string> = {}) {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [BIN, 'mcp', ...args],
    env: { ...baseEnv(), ...env },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const client = new Client({ name: 'hangar-stdio-test', version: '1.0.0' });
  clients.push(client);
  return { client, transport, stderr: () => stderr };
}

beforeAll(async () => {
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  url = `http://127.0.0.1:${(h.app.server.address() as { port: number }).port}`;
  a = await createOrgAdmin(h, 'Org A');
  dir = mkdtempSync(path.join(tmpdir(), 'hangar-mcp-'));
  configDir = path.join(dir, 'config');
  const login = await hangar(['login', '--base-url', url, '--key', a.key]);
  expect(login.code, login.stderr).toBe(0);
});
afterAll(async () => {
  for (const c of clients) await c.close().catch(() => undefined);
  await h?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('hangar mcp (stdio)', () => {
  it('serves the server’s tools with the saved login: initialize, tools/list and a call', async () => {
    const { client, transport, stderr } = await spawnMcp();
    await client.connect(transport);
    expect(client.getServerVersion()?.name).toBe('hangar');
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['execute_code', 'sandbox_create', 'run_agent', 'read_thread']));
    // A call that needs no isolation: the logged-in user's (empty) threads.
    const threads = (await client.callTool({ name: 'list_threads', arguments: {} })) as CallToolResult;
    expect(threads.isError, JSON.stringify(threads)).toBeFalsy();
    expect(threads.content[0]).toEqual({ type: 'text', text: 'no threads' });
    // Tool errors come through as results, as the server gave them.
    const missing = (await client.callTool({ name: 'sandbox_destroy', arguments: { sandbox_id: 'sbx_none' } })) as CallToolResult;
    expect(missing.isError).toBe(true);
    expect(JSON.stringify(missing.content)).toContain('not_found');
    expect(stderr()).toBe('');
  });

  itNeeding(isolationNeed(h.deps.isolation), 'execute_code through the bridge prints the program’s output', async () => {
    const { client, transport } = await spawnMcp();
    await client.connect(transport);
    const r = (await client.callTool({ name: 'execute_code', arguments: { language: 'python', code: 'print(6 * 7)' } })) as CallToolResult;
    expect(r.isError, JSON.stringify(r)).toBeFalsy();
    expect(r.content[0]).toMatchObject({ type: 'text', text: expect.stringContaining('42') });
    expect((r.structuredContent as { run: { stdout: string } }).run.stdout).toBe('42\n');
  });

  it('an unreachable server answers each request with a JSON-RPC error naming it (the host is not left waiting)', async () => {
    const { client, transport, stderr } = await spawnMcp(['--base-url', 'http://127.0.0.1:9']);
    await expect(client.connect(transport)).rejects.toThrow(/Hangar at http:\/\/127\.0\.0\.1:9 could not be reached/);
    expect(stderr()).toContain('could not be reached');
  });

  it('a revoked or wrong credential is reported as the server’s 401', async () => {
    const { client, transport } = await spawnMcp([], { HANGAR_API_KEY: 'hgr_live_not_a_real_key' });
    await expect(client.connect(transport)).rejects.toThrow(/401 unauthenticated/);
  });

  it('without a login it exits 2 with the reason on stderr and nothing on stdout', async () => {
    const r = await hangar(['mcp'], { HANGAR_CONFIG_DIR: path.join(dir, 'nowhere') });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('not logged in');
  });
});
