import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { FastifyAdapter } from '@bull-board/fastify';
import type { Queue } from 'bullmq';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { hasBearer, same } from './bearer.js';

/** Where the dashboard is served. */
export const DASHBOARD_PATH = '/queues';
const COOKIE = 'cmp_offload_dashboard';

/**
 * Mount the bull-board queue dashboard at /queues behind `token`. It can retry and remove jobs,
 * so every request under /queues needs the token: `Authorization: Bearer <token>`, or once
 * `?token=<token>` in a browser, which sets an HttpOnly, SameSite=Strict cookie scoped to /queues
 * and redirects to the same page without the token in the URL.
 */
export async function mountDashboard(app: FastifyInstance, queues: Queue[], token: string): Promise<void> {
  const adapter = new FastifyAdapter();
  createBullBoard({ queues: queues.map(q => new BullMQAdapter(q)), serverAdapter: adapter });
  adapter.setBasePath(DASHBOARD_PATH);
  await app.register(async scoped => {
    scoped.addHook('onRequest', async (req, reply) => authorize(req, reply, token));
    await scoped.register(adapter.registerPlugin(), { prefix: DASHBOARD_PATH });
  });
}

async function authorize(req: FastifyRequest, reply: FastifyReply, token: string): Promise<void> {
  if (hasBearer(req, token)) return;
  if (same(cookieOf(req.headers.cookie, COOKIE) ?? '', token)) return;
  const url = new URL(req.url, 'http://dashboard.invalid');
  const given = url.searchParams.get('token');
  if (given !== null && same(given, token)) {
    url.searchParams.delete('token');
    reply.header('set-cookie', `${COOKIE}=${encodeURIComponent(token)}; Path=${DASHBOARD_PATH}; HttpOnly; SameSite=Strict`);
    await reply.redirect(url.pathname + url.search, 303);
    return;
  }
  await reply.code(401).header('www-authenticate', 'Bearer').type('text/plain').send('dashboard token required\n');
}

function cookieOf(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) {
      try {
        return decodeURIComponent(part.slice(i + 1).trim());
      } catch {
        return undefined; // bad percent-encoding: as if no such cookie
      }
    }
  }
  return undefined;
}
