/**
 * A cap on the activity rows written for refused inbound requests (agent and workflow trigger webhooks). Anyone
 * who knows a public webhook URL can send refused requests; without a cap each would write an activity row (a write
 * flood from the open internet). Per key and per process: `perMinute` recorded a minute, the rest counted into the
 * next one recorded (`unrecordedBefore`).
 */
import type { Deps } from './context.js';
import { stateKey } from './state.js';

const WINDOWS = stateKey('rejections', () => new Map<string, { windowStart: number; recorded: number; suppressed: number }>());

/** Whether this refusal is recorded, and how many were left unrecorded before it. */
export function rejectionBudget(deps: Deps, key: string, perMinute: number, now = Date.now()): { record: boolean; suppressed: number } {
  const map = deps.state.get(WINDOWS);
  let w = map.get(key);
  if (!w || now - w.windowStart >= 60_000) {
    if (map.size >= 10_000) for (const [id, old] of map) if (now - old.windowStart >= 60_000) map.delete(id);
    const suppressed = w?.suppressed ?? 0;
    w = { windowStart: now, recorded: 0, suppressed };
    map.set(key, w);
  }
  if (w.recorded >= perMinute) {
    w.suppressed++;
    return { record: false, suppressed: 0 };
  }
  w.recorded++;
  const suppressed = w.suppressed;
  w.suppressed = 0;
  return { record: true, suppressed };
}
