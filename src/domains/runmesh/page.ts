/**
 * The page a device link's URL opens: the device's label, OS and app version as it reported them (so a person
 * approves the machine in front of them, not one an attacker started), then approval with their API key. No
 * third-party assets; every device-reported string is HTML-escaped; the script is served from this origin (CSP).
 */
import type { Deps } from '../../platform/context.js';
import { normalizeCode, publicLinkDetails } from './links.js';

const escapeHtml = (s: string): string =>
  s.replace(/[&<>"'`]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' })[c]!);

const STYLE = `body{font:16px/1.5 system-ui,sans-serif;max-width:34rem;margin:2rem auto;padding:0 1rem;color:#111}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem}dt{color:#555}dd{margin:0;word-break:break-all}
.code{font:600 1.6rem ui-monospace,monospace;letter-spacing:.1em}input{font:inherit;width:100%;padding:.4rem;box-sizing:border-box}
button{font:inherit;padding:.5rem 1rem;margin-top:.75rem}.warn{background:#fff4d6;padding:.5rem .75rem;border-radius:4px}
#result{margin-top:1rem;font-weight:600}`;

function shell(title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${escapeHtml(title)} · Hangar</title><style>${STYLE}</style></head><body>${body}</body></html>`;
}

export async function approvalPage(deps: Deps, input: string, sourceIp: string): Promise<string> {
  const code = normalizeCode(input);
  if (!code) {
    return shell(
      'Link a device',
      `<h1>Link a device</h1><p>Open the link <code>hangar device link</code> printed, or enter its code:</p>
<form method="get" action="/device"><input name="code" autocomplete="off" placeholder="XXXX-XXXX" aria-label="code"><button>Continue</button></form>`,
    );
  }
  const link = await publicLinkDetails(deps, code, sourceIp);
  if (!link)
    return shell('Unknown code', '<h1>Unknown code</h1><p>No device is waiting with this code. Check it on the device, or start linking again.</p>');
  if (link.status !== 'pending') {
    const what = link.status === 'expired' ? 'has expired: start linking again on the device' : 'was already approved';
    return shell('Device link', `<h1>Device link</h1><p>Code <span class="code">${escapeHtml(link.code)}</span> ${what}.</p>`);
  }
  return shell(
    'Approve a device',
    `<h1>Approve a device</h1>
<p class="warn">Approve only if this is the machine you are linking right now and it shows the same code.</p>
<p class="code">${escapeHtml(link.code)}</p>
<dl><dt>Device</dt><dd>${escapeHtml(link.deviceLabel)}</dd><dt>OS</dt><dd>${escapeHtml(link.os || 'not given')}</dd>
<dt>App version</dt><dd>${escapeHtml(link.appVersion || 'not given')}</dd><dt>Public key</dt><dd><code>${escapeHtml(link.publicKey)}</code></dd>
<dt>Expires</dt><dd>${escapeHtml(link.expiresAt)}</dd></dl>
<label for="key">Your API key (needs <code>runmesh:write</code>; it is sent to this server only)</label>
<input id="key" type="password" autocomplete="off" spellcheck="false">
<button id="approve" data-code="${escapeHtml(link.code)}">Approve this device</button>
<p id="result" role="status"></p>
<script src="/device/approve.js"></script>`,
  );
}

/** The page's only script: approve with the API key typed in, and say what happened. */
export const APPROVE_SCRIPT = `(() => {
  const button = document.getElementById('approve');
  const result = document.getElementById('result');
  if (!button) return;
  button.addEventListener('click', async () => {
    const key = document.getElementById('key').value.trim();
    if (!key) { result.textContent = 'Enter your API key first.'; return; }
    button.disabled = true;
    try {
      const res = await fetch('/v1/runmesh/devices/link/approve', {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer ' + key },
        body: JSON.stringify({ code: button.dataset.code }),
      });
      const body = await res.json();
      result.textContent = res.ok ? 'Approved: the device finishes linking by itself (node ' + body.data.node.id + ').' : 'Not approved: ' + body.error.message;
      if (!res.ok) button.disabled = false;
    } catch (e) {
      result.textContent = 'Could not reach the server: ' + e;
      button.disabled = false;
    }
  });
})();
`;
