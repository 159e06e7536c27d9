import { expect } from 'vitest';
import type { Harness } from './harness.js';

export interface ExpectedActivity {
  eventType: string;
  resourceType?: string;
  resourceId?: string;
  /** Keys the event's metadata must hold with these values (other keys may be present too). */
  metadata?: Record<string, unknown>;
}

/**
 * Asserts, as a user would see it through `GET /v1/activity`, that `actor` can read an event matching `expected`
 * (filtered by event type, and by resource when given). Returns the newest matching event.
 */
export async function expectActivity(
  h: Pick<Harness, 'app'>,
  actor: { headers: Record<string, string> },
  expected: ExpectedActivity,
): Promise<Record<string, any>> {
  const query = new URLSearchParams({ event_type: expected.eventType, limit: '200' });
  if (expected.resourceType) query.set('resource_type', expected.resourceType);
  if (expected.resourceId) query.set('resource_id', expected.resourceId);
  const res = await h.app.inject({ method: 'GET', url: `/v1/activity?${query}`, headers: actor.headers });
  expect(res.statusCode, res.body).toBe(200);
  const events = (JSON.parse(res.body) as { data: { events: Record<string, any>[] } }).data.events;
  const match = events.find(
    (e) =>
      e.eventType === expected.eventType &&
      (expected.resourceType === undefined || e.resourceType === expected.resourceType) &&
      (expected.resourceId === undefined || e.resourceId === expected.resourceId) &&
      Object.entries(expected.metadata ?? {}).every(([k, v]) => JSON.stringify(e.metadata?.[k]) === JSON.stringify(v)),
  );
  expect(match, `no ${expected.eventType} event matching ${JSON.stringify(expected)} among ${JSON.stringify(events)}`).toBeDefined();
  return match!;
}
