import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';

describe('the threads WebSocket keeps its query credential out of the logs', () => {
  let h: Harness;
  let admin: Actor;
  let base: string;
  const lines: string[] = [];
  beforeAll(async () => {
    const sink = new Writable({
      write(chunk, _enc, cb) {
        lines.push(String(chunk));
        cb();
      },
    });
    h = await createHarness({ LOG_LEVEL: 'debug' }, { log: pino({ level: 'debug' }, sink) });
    base = (await h.app.listen({ host: '127.0.0.1', port: 0 })).replace(/^http/, 'ws');
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  it('logs the request with api_key and token redacted', async () => {
    const made = await h.app.inject({ method: 'POST', url: '/v1/threads', headers: admin.headers, payload: { title: 'logged' } });
    expect(made.statusCode).toBe(201);
    const id = json(made).data.id as string;
    for (const query of [`api_key=${admin.key}`, `token=${admin.token}`]) {
      const ws = new WebSocket(`${base}/v1/threads/${id}/events?${query}`);
      const first = await new Promise<string>((resolve, reject) => {
        ws.once('message', (d) => resolve(String(d)));
        ws.once('error', reject);
      });
      // Control: the credential was accepted (the socket's first frame is the snapshot).
      expect(JSON.parse(first).type).toBe('snapshot');
      ws.close();
    }
    const all = lines.join('');
    expect(all).toContain(`/v1/threads/${id}/events?api_key=%28redacted%29`);
    expect(all).toContain('token=%28redacted%29');
    expect(all).not.toContain(admin.key);
    expect(all).not.toContain(admin.token);
  });
});
