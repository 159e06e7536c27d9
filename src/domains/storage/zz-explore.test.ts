import { it } from 'vitest';
import { readdirSync } from 'node:fs';
import { createHarness, createOrgAdmin, json } from '../../../test/harness.js';

function walk(dir: string): string[] { try { return readdirSync(dir, { recursive: true, withFileTypes: true }).filter(d => d.isFile()).map(d => d.name); } catch { return []; } }
function form(parts: Array<{ name: string; value?: string; filename?: string; type?: string; data?: Buffer }>) {
  const boundary = '----hangartest';
  const chunks: Buffer[] = [];
  for (const p of parts) {
    chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${p.name}"${p.filename !== undefined ? `; filename="${p.filename}"` : ''}\r\n${p.type ? `Content-Type: ${p.type}\r\n` : ''}\r\n`));
    chunks.push(p.data ?? Buffer.from(p.value ?? ''));
    chunks.push(Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { payload: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

it('explore', async () => {
  const h = await createHarness({ HANGAR_UPLOAD_LIMIT_BYTES: '100', HANGAR_STORAGE_QUOTA_BYTES: '150' });
  const a = await createOrgAdmin(h);
  const s = await createOrgAdmin(h);
  const ws = a.personalWorkspaceId;
  const post = async (f: ReturnType<typeof form>, headers = a.headers) => {
    const r = await h.app.inject({ method: 'POST', url: `/v1/workspaces/${ws}/files`, headers: { ...headers, 'content-type': f.contentType }, payload: f.payload });
    console.log(r.statusCode, r.body, walk(h.dataDir + '/blobs'));
  };
  await post(form([{ name: 'path', value: 'docs/x' }, { name: 'file', filename: 'a.txt', data: Buffer.from('aaa') }, { name: 'file', filename: 'b.png', data: Buffer.from('bb'), type: 'application/octet-stream' }]));
  await post(form([{ name: 'file', filename: 'big.txt', data: Buffer.alloc(101) }]));
  await post(form([{ name: 'file', filename: 'ok.txt', data: Buffer.alloc(100) }]));
  await post(form([{ name: 'file', filename: 'q.txt', data: Buffer.alloc(60) }]));
  await post(form([{ name: 'file', filename: 'z.txt', data: Buffer.alloc(6) }]), s.headers);
  await post(form([{ name: 'path', value: '/etc' }, { name: 'file', filename: 'z.txt', data: Buffer.alloc(6) }]));
  await post(form([{ name: 'file', filename: '../../z.txt', data: Buffer.alloc(6) }]));
  await post(form([{ name: 'path', value: 'x' }]));
  const u = await h.app.inject({ method: 'GET', url: '/v1/storage/usage', headers: a.headers });
  console.log(u.body);
  await h.close();
});
