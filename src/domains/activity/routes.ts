import { z } from 'zod';
import { errorResponses, page, PageMetaSchema } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import { ActivityList, ActivityQuery } from './schemas.js';
import { listActivity } from './service.js';

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
    async (req) => {
      const result = await listActivity(req.ctx, req.query);
      return page(req, { events: result.events }, result);
    },
  );
}
