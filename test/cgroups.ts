import { existsSync } from 'node:fs';
import path from 'node:path';
import { cgroupSetup } from '../src/platform/isolation/cgroups.js';

/** The hierarchy this host boots with: v2 when /sys/fs/cgroup is the unified hierarchy's mount. */
export const hostHierarchy: 'v1' | 'v2' = existsSync('/sys/fs/cgroup/cgroup.controllers') ? 'v2' : 'v1';

/**
 * A sandbox's cgroup directory as runc made it: on v1 the one in `controller`'s hierarchy, on v2 the one unified
 * directory (inside Hangar's subtree; `controller` is then ignored).
 */
export async function sandboxCgroup(installId: string, id: string, controller: string): Promise<string> {
  const cg = await cgroupSetup();
  if (cg.version === 'v1') return path.join(cg.mount, controller, 'hangar-sandboxes', installId, id);
  return path.join(cg.mount, `${cg.subtree}/sandboxes`, installId, id);
}
