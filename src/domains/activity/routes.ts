import { z } from 'zod';
import { errorResponses, pageJson, PageMetaSchema } from '../../platform/http/envelope.js';
import { sendJsonText, type App } from '../../platform/http/server.js';
import { ActivityList, ActivityQuery } from './schemas.js';
import { listActivityJson } from './service.js';

export const ActivityPage = z.object({ data: ActivityList, meta: PageMetaSchema });

export async function activityRoutes(app: App) {
  app.get(
    '/v1/activity',
    {
      config: { scope: 'activity:read' },
      schema: {
        tags: ['activity'],
        summary: 'List activity events',
        description:
          'Newest first. Organization admins see every event; members see their own actions, or all events of a resource they can access when `resource_type` and `resource_id` are given.',
        querystring: ActivityQuery,
        response: { 200: ActivityPage, ...errorResponses },
      },
    },
    // The events come as JSON text from the database, and the page around them is written as text too: the hot
    // path of the API never builds the events as objects (ADR 0037).
    async (req, reply) => {
      const result = await listActivityJson(req.ctx, req.query);
      return sendJsonText(req, reply, pageJson(req, 'events', result.events, result));
    },
  );
}
