import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runTool, type ToolEnv } from '../platform/agent-tools.js';
import { WorkspaceHost } from './host.js';

/** A 1x1 PNG. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');

describe('WorkspaceHost with the agent tools', () => {
  let root: string;
  let ws: string;
  let host: WorkspaceHost;
  let streamed: string;
  let env: ToolEnv;
  beforeEach(async () => {
    root = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'hangar-host-')));
    ws = path.join(root, 'ws');
    await fs.mkdir(ws);
    host = await WorkspaceHost.open(ws);
    streamed = '';
    env = {
      host,
      home: host.workspace,
      tmp: host.tmp,
      pids: new Set(),
      onOutput: (c) => {
        streamed += c;
      },
      signal: new AbortController().signal,
    };
  });
  afterEach(async () => {
    await host.dispose();
    await fs.rm(root, { recursive: true, force: true });
  });

  it('runs a command in the workspace: output, exit codes, streamed output', async () => {
    const ok = await runTool('exec_command', { cmd: 'echo hello; echo oops >&2; pwd' }, env);
    expect(ok.isError).toBe(false);
    expect(ok.output).toContain('exit code 0');
    expect(ok.output).toContain('hello');
    expect(ok.output).toMatch(/stderr:\noops/);
    expect(ok.output).toContain(ws);
    expect(streamed).toContain('hello');
    const bad = await runTool('exec_command', { cmd: 'exit 3' }, env);
    expect(bad).toMatchObject({ isError: true });
    expect(bad.output).toContain('exit code 3');
    await fs.mkdir(path.join(ws, 'sub'));
    expect((await runTool('exec_command', { cmd: 'pwd', cwd: 'sub' }, env)).output).toContain(path.join(ws, 'sub'));
  });

  it('kills a command past its timeout, with its children', async () => {
    const started = Date.now();
    const r = await runTool('exec_command', { cmd: 'sleep 30 & sleep 30; echo never', timeout_ms: 300 }, env);
    expect(r.isError).toBe(true);
    expect(r.output).toContain('timed out (killed)');
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('runs a background process and talks to it with write_stdin', async () => {
    const r = await runTool('exec_command', { cmd: 'while read l; do echo "got $l"; done; echo bye', background: true }, env);
    const pid = Number(/still running \(pid (\d+)\)/.exec(r.output)?.[1]);
    expect(pid).toBeGreaterThan(0);
    // write_stdin answers the output so far; on a loaded machine the answer may come on a later call, as a model would see.
    let seen = (await runTool('write_stdin', { pid, data: 'one\n' }, env)).output;
    for (let i = 0; i < 50 && !seen.includes('got one'); i++) seen += (await runTool('write_stdin', { pid, data: '' }, env)).output;
    expect(seen).toContain('got one');
    const closed = await runTool('write_stdin', { pid, data: 'two\n', close: true }, env);
    expect(closed.output).toContain('got two');
    expect((await runTool('write_stdin', { pid: 999999, data: 'x' }, env)).isError).toBe(true);
  });

  it('applies a patch that creates a file, then one that edits it, and refuses one that does not apply', async () => {
    const create = ['--- /dev/null', '+++ b/notes.txt', '@@ -0,0 +1,2 @@', '+alpha', '+beta', ''].join('\n');
    const c = await runTool('apply_patch', { patch: create }, env);
    expect(c.isError, c.output).toBe(false);
    expect(await fs.readFile(path.join(ws, 'notes.txt'), 'utf8')).toBe('alpha\nbeta\n');
    const edit = ['--- a/notes.txt', '+++ b/notes.txt', '@@ -1,2 +1,2 @@', ' alpha', '-beta', '+gamma', ''].join('\n');
    const e = await runTool('apply_patch', { patch: edit }, env);
    expect(e.isError, e.output).toBe(false);
    expect(await fs.readFile(path.join(ws, 'notes.txt'), 'utf8')).toBe('alpha\ngamma\n');
    const wrong = await runTool('apply_patch', { patch: edit }, env);
    expect(wrong.isError).toBe(true);
    expect(wrong.output).toContain('does not apply');
    expect(await fs.readFile(path.join(ws, 'notes.txt'), 'utf8')).toBe('alpha\ngamma\n');
    expect(await fs.readdir(host.tmp)).toEqual([]); // scratch files cleaned up
  });

  it('refuses paths and working directories outside the workspace, symlinks included', async () => {
    await fs.writeFile(path.join(root, 'secret.png'), PNG);
    await fs.symlink(root, path.join(ws, 'escape'));
    await expect(host.write('../outside.txt', Buffer.from('x'))).rejects.toThrow(/outside the workspace/);
    await expect(host.write('escape/outside.txt', Buffer.from('x'))).rejects.toThrow(/outside the workspace/);
    await expect(host.write('/etc/hangar-test', Buffer.from('x'))).rejects.toThrow(/outside the workspace/);
    await expect(fs.stat(path.join(root, 'outside.txt'))).rejects.toThrow();
    await expect(host.read('escape/secret.png')).rejects.toThrow(/outside the workspace/);
    const v = await runTool('view_image', { path: path.join(root, 'secret.png') }, env);
    expect(v.isError).toBe(true);
    expect(v.output).toMatch(/outside the workspace/);
    const c = await runTool('exec_command', { cmd: 'pwd', cwd: '..' }, env);
    expect(c.isError).toBe(true);
    expect(c.output).toMatch(/outside the workspace/);
    await host.write('deep/new/file.txt', Buffer.from('ok'));
    expect(await fs.readFile(path.join(ws, 'deep/new/file.txt'), 'utf8')).toBe('ok');
  });

  it('views an image in the workspace', async () => {
    await fs.writeFile(path.join(ws, 'dot.png'), PNG);
    const r = await runTool('view_image', { path: 'dot.png' }, env);
    expect(r.isError).toBe(false);
    expect(r.image).toEqual({ data: PNG.toString('base64'), mediaType: 'image/png' });
    expect(r.output).toContain(`${PNG.length} bytes`);
  });

  it('dispose kills background processes', async () => {
    const r = await runTool('exec_command', { cmd: 'sleep 60', background: true }, env);
    const pid = Number(/pid (\d+)/.exec(r.output)?.[1]);
    await host.dispose();
    expect(() => process.kill(pid, 0)).toThrow();
  });
});
