import type { Actor, Harness } from '../../../test/harness.js';
import { securitySuite } from '../../../test/security.js';

/** The URL of `docs/a.txt` in the owner's personal workspace, written first so the owner's control finds it. */
async function withFile(o: Actor, h: Harness, url: string): Promise<string> {
  const res = await h.app.inject({
    method: 'PUT',
    url: `/v1/workspaces/${o.personalWorkspaceId}/files/docs/a.txt`,
    headers: { ...o.headers, 'content-type': 'text/plain' },
    payload: 'hello',
  });
  if (res.statusCode >= 300) throw new Error(`writing docs/a.txt: ${res.statusCode} ${res.body}`);
  return url;
}

const boundary = 'securitysuite';
const form = [
  `--${boundary}\r\nContent-Disposition: form-data; name="path"\r\n\r\nin\r\n`,
  `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nhello\r\n`,
  `--${boundary}--\r\n`,
].join('');

securitySuite('workspace files', [
  { method: 'GET', url: () => '/v1/workspaces', scope: 'storage:read' },
  { method: 'GET', url: (o) => `/v1/workspaces/${o.personalWorkspaceId}`, scope: 'storage:read', crossOrg: true },
  { method: 'GET', url: () => '/v1/storage/usage', scope: 'storage:read' },
  { method: 'GET', url: (o) => `/v1/workspaces/${o.personalWorkspaceId}/files`, scope: 'storage:read', crossOrg: true },
  { method: 'GET', url: (o, h) => withFile(o, h, `/v1/workspaces/${o.personalWorkspaceId}/files?path=docs`), scope: 'storage:read', crossOrg: true },
  { method: 'GET', url: (o, h) => withFile(o, h, `/v1/workspaces/${o.personalWorkspaceId}/files/docs/a.txt`), scope: 'storage:read', crossOrg: true },
  {
    method: 'PUT',
    url: (o) => `/v1/workspaces/${o.personalWorkspaceId}/files/docs/a.txt`,
    scope: 'storage:write',
    body: 'file bytes',
    contentType: 'text/plain',
    crossOrg: true,
  },
  {
    method: 'POST',
    url: (o) => `/v1/workspaces/${o.personalWorkspaceId}/files`,
    scope: 'storage:write',
    body: form,
    contentType: `multipart/form-data; boundary=${boundary}`,
    crossOrg: true,
  },
  { method: 'POST', url: (o) => `/v1/workspaces/${o.personalWorkspaceId}/folders`, scope: 'storage:write', body: { path: 'new' }, crossOrg: true },
  {
    method: 'POST',
    url: (o) => `/v1/workspaces/${o.personalWorkspaceId}/move`,
    scope: 'storage:write',
    body: { from: 'docs/a.txt', to: 'docs/b.txt' },
    crossOrg: true,
  },
  { method: 'DELETE', url: (o) => `/v1/workspaces/${o.personalWorkspaceId}/files/docs?recursive=true`, scope: 'storage:write', crossOrg: true },
  { method: 'GET', url: (o) => `/v1/workspaces/${o.personalWorkspaceId}/activity`, scope: 'activity:read', crossOrg: true },
]);
