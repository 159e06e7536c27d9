import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Spawner } from './spawner.js';

const BIN = fileURLToPath(new URL('../../../native/build/hangar-spawner', import.meta.url));

describe('Spawner (native/spawner.c)', () => {
  const spawners: Spawner[] = [];
  const make = () => {
    const s = new Spawner(BIN);
    spawners.push(s);
    return s;
  };
  afterEach(() => {
    for (const s of spawners.splice(0)) s.close();
  });

  it('is built by the setup script', () => {
    expect(existsSync(BIN)).toBe(true);
  });

  it('runs a program with its stdin, argv and the empty environment, and keeps each output apart', async () => {
    const s = make();
    const r = await s.spawn({
      file: '/bin/sh',
      args: ['-c', 'read line; echo "out:$line:$1"; echo "err:$(env | wc -l)" >&2; echo report >&3; exit 7', 'sh', 'arg one'],
      stdin: 'hello\n',
      caps: [1024, 1024, 1024],
    }).done;
    expect(r).toMatchObject({ code: 7, signal: null, error: null, truncated: [false, false, false] });
    expect(r.outputs.map((b) => b.toString())).toEqual(['out:hello:arg one\n', 'err:1\n', 'report\n']);
  });

  it('keeps the first cap bytes, reads and drops the rest (the program never blocks), and says so', async () => {
    const s = make();
    const r = await s.spawn({ file: '/bin/sh', args: ['-c', 'head -c 3000000 /dev/zero; echo done >&2'], caps: [100, 100] }).done;
    expect(r.code).toBe(0);
    expect(r.outputs[0]).toHaveLength(100);
    expect(r.truncated).toEqual([true, false]);
    expect(r.outputs[1]?.toString()).toBe('done\n');
  });

  it('writes a large stdin while reading output, so neither side deadlocks', async () => {
    const s = make();
    const input = Buffer.alloc(4 * 1024 * 1024, 'x');
    const r = await s.spawn({ file: '/bin/cat', args: [], stdin: input, caps: [8 * 1024 * 1024, 1024] }).done;
    expect(r.code).toBe(0);
    expect(r.outputs[0]?.equals(input)).toBe(true);
  });

  it('reports a signal, delivers kill() and reports a program that cannot be executed', async () => {
    const s = make();
    const h = s.spawn({ file: '/bin/sleep', args: ['30'], caps: [64, 64] });
    const other = s.spawn({ file: '/bin/echo', args: ['still served'], caps: [64, 64] });
    expect((await other.done).outputs[0]?.toString()).toBe('still served\n');
    h.kill('SIGKILL');
    expect(await h.done).toMatchObject({ code: null, signal: 'SIGKILL', error: null });
    const missing = await s.spawn({ file: '/nonexistent/program', args: [], caps: [64, 64] }).done;
    expect(missing.code).toBeNull();
    expect(missing.error).toMatch(/No such file or directory/);
    await expect(s.exec('/bin/sh', ['-c', 'echo nope >&2; exit 3'])).rejects.toThrow('nope');
    await expect(s.exec('/bin/echo', ['ok'])).resolves.toMatchObject({ stdout: 'ok\n' });
  });

  it('runs many programs at once', async () => {
    const s = make();
    const runs = Array.from(
      { length: 40 },
      (_, i) => s.spawn({ file: '/bin/sh', args: ['-c', `sleep 0.0${i % 5}; echo ${i}`], caps: [64, 64] }).done,
    );
    const out = await Promise.all(runs);
    expect(out.map((r) => r.outputs[0]?.toString().trim())).toEqual(Array.from({ length: 40 }, (_, i) => String(i)));
  });

  it('ends what was in flight with an error when the spawner dies, and starts a new one for the next request', async () => {
    const s = make();
    const first = await s.spawn({ file: '/bin/sh', args: ['-c', 'echo $PPID'], caps: [64, 64] }).done;
    const spawnerPid = Number(first.outputs[0]?.toString());
    expect(spawnerPid).toBeGreaterThan(1);
    const inFlight = s.spawn({ file: '/bin/sleep', args: ['30'], caps: [64, 64] });
    process.kill(spawnerPid, 'SIGKILL');
    const r = await inFlight.done;
    expect(r.error).toMatch(/the spawner was killed by SIGKILL/);
    const next = await s.spawn({ file: '/bin/sh', args: ['-c', 'echo $PPID'], caps: [64, 64] }).done;
    expect(next.code).toBe(0);
    expect(Number(next.outputs[0]?.toString())).not.toBe(spawnerPid);
  });

  it('answers a clear error when the spawner binary is missing', async () => {
    const s = new Spawner('/nonexistent/hangar-spawner');
    spawners.push(s);
    const r = await s.spawn({ file: '/bin/true', args: [], caps: [64, 64] }).done;
    expect(r.error).toMatch(/spawner/);
  });
});
