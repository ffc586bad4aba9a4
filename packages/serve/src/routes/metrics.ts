/**
 * The metrics API: `GET /metrics[?name[]=a&name[]=b]` in Prometheus text format 0.0.4.
 * Not protected by tokens (as TorchServe); bind it to 127.0.0.1 or a private network.
 */
import type { FastifyInstance, FastifySchema } from 'fastify';
import type { ServerMetrics } from '../metrics/server-metrics.ts';
import { declareRouteAuth } from '../auth/token-authorization.ts';

function namesFrom(query: Record<string, unknown>): string[] {
  const names: string[] = [];
  for (const key of ['name[]', 'name']) {
    const value = query[key];
    if (typeof value === 'string') names.push(value);
    else if (Array.isArray(value)) names.push(...value.filter((v): v is string => typeof v === 'string'));
  }
  return names;
}

/** Fastify plugin serving `GET /metrics` from `metrics`. */
export async function metricsRoutes(app: FastifyInstance, options: { metrics: ServerMetrics }): Promise<void> {
  declareRouteAuth(app, 'none');
  app.get(
    '/metrics',
    {
      schema: {
        description:
          "Metrics in Prometheus text format (TorchServe's names, plus Marina's histograms); name[]= filters.",
        querystring: { type: 'object', properties: { 'name[]': { type: 'array', items: { type: 'string' } } } },
        response: { 200: { description: 'Prometheus text exposition format 0.0.4.' } },
      } as FastifySchema,
    },
    async (request, reply) => {
      const body = await options.metrics.render(namesFrom(request.query as Record<string, unknown>));
      return reply
        .code(200)
        .header('content-type', options.metrics.contentType)
        .header('x-request-id', request.id)
        .send(body);
    },
  );
}
