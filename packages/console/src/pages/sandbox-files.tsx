import type { components, Sandbox } from '@hangar/sdk';
import { type ChangeEvent, type FormEvent, useRef, useState } from 'react';
import { data, toApiError, type ApiError, useLoad, useSession } from '../api.js';
import { ActionButton, Button, Empty, ErrorBox, Field, Loading, Time } from '../ui.js';

type FileEntry = components['schemas']['SandboxFileEntry'];

export const HOME = '/home/user';

/** `1.2 KiB`, `3.4 MiB`: a size as people read it. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = -1;
  do {
    v /= 1024;
    u++;
  } while (v >= 1024 && u < units.length - 1);
  return `${v >= 10 ? v.toFixed(0) : v.toFixed(1)} ${units[u]}`;
}

/** A folder's child path. */
export function joinPath(dir: string, name: string): string {
  return dir === '/' ? `/${name}` : `${dir.replace(/\/+$/, '')}/${name}`;
}

/** A path's parent folder (`/` for `/`). */
export function parentOf(path: string): string {
  const trimmed = path.replace(/\/+$/, '');
  const i = trimmed.lastIndexOf('/');
  return i <= 0 ? '/' : trimmed.slice(0, i);
}

/** Saves bytes as a file of the user's: a blob URL behind a clicked `<a download>`. */
export function saveBytes(bytes: Uint8Array, name: string): void {
  const url = URL.createObjectURL(new Blob([bytes as BlobPart], { type: 'application/octet-stream' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.rel = 'noopener';
  document.body.append(a);
  a.click();
  a.remove();
  // The download has taken the blob by the next tasks; release it a little later.
  setTimeout(() => URL.revokeObjectURL(url), 30_000);
}

/**
 * The files of a running sandbox: a folder's entries, opening folders and going up, making a folder, uploading
 * files from the user's machine and downloading files to it.
 */
export function FileBrowser({ sandboxId }: { sandboxId: string }) {
  const { hangar, can } = useSession();
  const [cwd, setCwd] = useState(HOME);
  const [goTo, setGoTo] = useState(HOME);
  const [folder, setFolder] = useState('');
  const [status, setStatus] = useState('');
  const [error, setError] = useState<ApiError | null>(null);
  const [uploading, setUploading] = useState(false);
  const fileInput = useRef<HTMLInputElement>(null);
  const handle = useRef<{ id: string; sandbox: Promise<Sandbox> } | null>(null);
  const writable = can('sandbox:write');

  /** The SDK's sandbox (its `files`), fetched once: `get` leaves its state as it is. */
  const sandbox = () => {
    if (handle.current?.id !== sandboxId) {
      const promise = hangar.sandboxes.get(sandboxId);
      promise.catch(() => {
        if (handle.current?.sandbox === promise) handle.current = null;
      });
      handle.current = { id: sandboxId, sandbox: promise };
    }
    return handle.current.sandbox;
  };

  const listing = useLoad(async () => {
    const answer = await data(hangar.api.GET('/v1/sandboxes/{id}/files', { params: { path: { id: sandboxId }, query: { path: cwd } } }));
    return 'entries' in answer ? { entries: answer.entries, file: null } : { entries: [] as FileEntry[], file: answer.entry };
  }, [sandboxId, cwd]);

  const open = (path: string) => {
    setError(null);
    setStatus('');
    setCwd(path);
    setGoTo(path);
  };

  const attempt = async (fn: () => Promise<string>) => {
    setError(null);
    try {
      setStatus(await fn());
    } catch (err) {
      setError(toApiError(err));
    }
  };

  const makeFolder = async (e: FormEvent) => {
    e.preventDefault();
    const name = folder.trim();
    if (!name) return;
    await attempt(async () => {
      const entry = await data(
        hangar.api.POST('/v1/sandboxes/{id}/folders', {
          params: { path: { id: sandboxId } },
          body: { path: name.startsWith('/') ? name : joinPath(cwd, name) },
        }),
      );
      setFolder('');
      listing.reload();
      return `Folder ${entry.path} created.`;
    });
  };

  const upload = async (e: ChangeEvent<HTMLInputElement>) => {
    const files = [...(e.target.files ?? [])];
    if (!files.length) return;
    setUploading(true);
    await attempt(async () => {
      const sbx = await sandbox();
      const done: string[] = [];
      try {
        for (const file of files) {
          const entry = await sbx.files.write(joinPath(cwd, file.name), file);
          done.push(`${entry.name} (${formatBytes(entry.size)})`);
        }
      } finally {
        if (fileInput.current) fileInput.current.value = '';
        setUploading(false);
        if (done.length) listing.reload();
      }
      return `Uploaded ${done.join(', ')}.`;
    });
  };

  const download = async (entry: FileEntry) => {
    const sbx = await sandbox();
    const bytes = await sbx.files.read(entry.path, { format: 'bytes' });
    saveBytes(bytes, entry.name);
    setStatus(`Downloaded ${entry.name} (${formatBytes(bytes.byteLength)}).`);
  };

  const remove = async (entry: FileEntry) => {
    const sbx = await sandbox();
    await sbx.files.remove(entry.path, { recursive: entry.type === 'dir' });
    setStatus(`Deleted ${entry.path}.`);
    listing.reload();
  };

  const entries = listing.data?.entries ?? [];
  return (
    <section className="panel files" aria-labelledby="files-heading">
      <h2 id="files-heading" className="panel-title">
        Files
      </h2>
      <div className="files-bar">
        <Button onClick={() => open(parentOf(cwd))} disabled={cwd === '/'} aria-label="Up to the parent folder">
          ↑ Up
        </Button>
        <Button onClick={() => open(HOME)} disabled={cwd === HOME}>
          Home
        </Button>
        <form
          className="inline"
          onSubmit={(e) => {
            e.preventDefault();
            if (goTo.trim()) open(goTo.trim().startsWith('/') ? goTo.trim() : joinPath(HOME, goTo.trim()));
          }}
        >
          <Field label="Folder">{(id) => <input id={id} className="mono path-input" value={goTo} onChange={(e) => setGoTo(e.target.value)} />}</Field>
          <button type="submit" className="btn btn-secondary">
            Open
          </button>
        </form>
        <Button onClick={listing.reload}>Refresh files</Button>
      </div>
      <p className="muted">
        In <code data-testid="cwd">{cwd}</code>
      </p>
      {writable ? (
        <div className="files-bar">
          <form className="inline" onSubmit={makeFolder}>
            <Field label="New folder">
              {(id) => <input id={id} value={folder} onChange={(e) => setFolder(e.target.value)} placeholder="name" />}
            </Field>
            <button type="submit" className="btn btn-secondary" disabled={!folder.trim()}>
              Create folder
            </button>
          </form>
          <Field label="Upload a file">
            {(id) => <input id={id} ref={fileInput} type="file" multiple onChange={upload} disabled={uploading} aria-busy={uploading} />}
          </Field>
        </div>
      ) : null}
      <p className="muted" role="status" aria-live="polite" data-testid="files-status">
        {uploading ? 'Uploading…' : status}
      </p>
      <ErrorBox error={error} title="Failed" />
      <ErrorBox error={listing.error} title={`Could not list ${cwd}`} />
      {listing.loading && !listing.data ? <Loading what="files" /> : null}
      {listing.data?.file ? (
        <p>
          {listing.data.file.path} is a file ({formatBytes(listing.data.file.size)}).{' '}
          <ActionButton action={() => download(listing.data!.file!)}>Download {listing.data.file.name}</ActionButton>
        </p>
      ) : null}
      {listing.data && !listing.data.file && entries.length === 0 ? (
        <Empty>This folder is empty.{writable ? ' Upload a file or create a folder here.' : ''}</Empty>
      ) : null}
      {entries.length > 0 ? (
        <div className="table-wrap">
          <table aria-label={`Files in ${cwd}`}>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Size</th>
                <th scope="col">Mode</th>
                <th scope="col">Modified</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {entries.map((entry) => (
                <tr key={entry.path}>
                  <td>
                    {entry.type === 'dir' ? (
                      <button type="button" className="link-button" onClick={() => open(entry.path)} aria-label={`Open folder ${entry.name}`}>
                        {entry.name}/
                      </button>
                    ) : (
                      <span className="mono">
                        {entry.name}
                        {entry.type === 'symlink' ? <span className="muted"> (link)</span> : null}
                      </span>
                    )}
                  </td>
                  <td>{entry.type === 'dir' ? '—' : formatBytes(entry.size)}</td>
                  <td className="mono">{entry.mode}</td>
                  <td>
                    <Time iso={entry.mtime} />
                  </td>
                  <td>
                    <div className="actions">
                      {entry.type !== 'dir' ? (
                        <ActionButton aria-label={`Download ${entry.name}`} action={() => download(entry)}>
                          Download
                        </ActionButton>
                      ) : null}
                      {writable ? (
                        <ActionButton
                          kind="danger"
                          aria-label={`Delete ${entry.name}`}
                          confirm={entry.type === 'dir' ? `Delete the folder ${entry.path} and everything in it?` : `Delete ${entry.path}?`}
                          action={() => remove(entry)}
                        >
                          Delete
                        </ActionButton>
                      ) : null}
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </section>
  );
}
