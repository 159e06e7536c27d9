import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';

// desktop-ubuntu as a server with the default HANGAR_TEMPLATE_PREBUILD=true runs it: built at start-up,
// then every sandbox of it has an X display with a window manager.
describe('the desktop-ubuntu system template', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_TEMPLATE_PREBUILD: 'true' });
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  it('is built at start-up, then its sandboxes have display :99 with openbox, and screenshots work', async () => {
    let template: any;
    const deadline = Date.now() + 240_000;
    do {
      await new Promise((r) => setTimeout(r, 1000));
      template = json(await h.app.inject({ method: 'GET', url: '/v1/templates/desktop-ubuntu', headers: admin.headers })).data;
    } while (template.status !== 'ready' && template.status !== 'failed' && Date.now() < deadline);
    expect(template).toMatchObject({ status: 'ready', progress: 100, system: true, error: null });
    expect(template.runs).toContain('X display :99');

    const created = await h.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: admin.headers,
      payload: { template: 'desktop-ubuntu', network: false },
    });
    expect(created.statusCode).toBe(201);
    const id = json(created).data.id;
    const cmd = [
      'for i in $(seq 200); do xdpyinfo >/dev/null 2>&1 && pgrep -x openbox >/dev/null && break; sleep 0.1; done',
      'echo $DISPLAY',
      'xdotool getdisplaygeometry',
      'import -window root /tmp/s.png && identify -format "%m\\n" /tmp/s.png',
      'pgrep -x openbox >/dev/null && echo openbox',
    ].join('; ');
    const res = await h.app.inject({ method: 'POST', url: `/v1/sandboxes/${id}/commands`, headers: admin.headers, payload: { cmd } });
    expect(json(res).data, res.body).toMatchObject({ exitCode: 0 });
    const lines = json(res).data.stdout.trim().split('\n');
    expect(lines[0]).toBe(':99');
    expect(lines[1]).toBe('1280 800');
    expect(lines[2]).toMatch(/png/i);
    expect(lines[3]).toBe('openbox');
  }, 300_000);
});
