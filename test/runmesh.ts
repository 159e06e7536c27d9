import { generateKeyPairSync } from 'node:crypto';
import { expect } from 'vitest';
import { json, type Actor, type Harness } from './harness.js';

/** A WireGuard key pair as a device makes it: raw 32-byte Curve25519 keys, base64. */
export function wgKeyPair() {
  const { publicKey, privateKey } = generateKeyPairSync('x25519');
  return {
    publicKey: publicKey.export({ format: 'der', type: 'spki' }).subarray(-32).toString('base64'),
    privateKey: privateKey.export({ format: 'der', type: 'pkcs8' }).subarray(-32).toString('base64'),
  };
}

/** Starts a link as a device would, approves it as `approver`, and collects the credential. */
export async function linkDevice(h: Harness, approver: Actor, label = 'laptop') {
  const keys = wgKeyPair();
  const start = await h.app.inject({
    method: 'POST',
    url: '/v1/runmesh/devices/link/start',
    payload: { publicKey: keys.publicKey, deviceLabel: label, os: 'linux', appVersion: '1.0.0' },
  });
  expect(start.statusCode, start.body).toBe(201);
  const { code, pollSecret } = json(start).data;
  const approve = await h.app.inject({ method: 'POST', url: '/v1/runmesh/devices/link/approve', headers: approver.headers, payload: { code } });
  expect(approve.statusCode, approve.body).toBe(200);
  const poll = await h.app.inject({ method: 'POST', url: '/v1/runmesh/devices/link/poll', payload: { code, pollSecret } });
  expect(json(poll).data.status).toBe('approved');
  return {
    ...keys,
    code,
    pollSecret,
    nodeId: json(poll).data.nodeId as string,
    token: json(poll).data.deviceToken as string,
    meshAddress: json(poll).data.meshAddress as string,
  };
}
