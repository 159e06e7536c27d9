/** Cron expressions and time zones, checked and stepped with croner (the embedded engine's ticks, and 400s for bad input). */
import { Cron } from 'croner';

/** Null when `cron` (5 or 6 fields) and `tz` (IANA) are valid; else what is wrong, in words. */
export function cronProblem(cron: string, tz = 'UTC'): string | null {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
  } catch {
    return `"${tz}" is not an IANA time zone`;
  }
  const fields = cron.trim().split(/\s+/).length;
  if (fields !== 5 && fields !== 6) return `"${cron}" must have 5 fields (minute hour day month weekday) or 6 (seconds first)`;
  try {
    const c = new Cron(cron, { timezone: tz, paused: true });
    if (!c.nextRun()) return `"${cron}" never fires`;
    return null;
  } catch (err) {
    return `"${cron}" is not a cron expression: ${(err as Error).message}`;
  }
}

/** The first tick of `cron` in `tz` strictly after `after`. */
export function nextTick(cron: string, tz: string | undefined, after: Date): Date | null {
  return new Cron(cron, { timezone: tz ?? 'UTC', paused: true }).nextRun(after);
}
