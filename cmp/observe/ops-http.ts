import Fastify, { type FastifyInstance } from 'fastify';
import type { HttpAddress } from '../config/options.js';
import type { Logger } from '../log.js';
import { registry } from './metrics.js';

/** One readiness condition: a name and whether it holds now (may be asked of another process). */
export interface ReadinessCheck {
  name: string;
  ok(): boolean | Promise<boolean>;
}

export interface OpsHttpOptions {
  /** Every check must hold for /readyz to answer 200. */
  checks: ReadinessCheck[];
  /** Refresh gauges that are read at scrape time (queue depth). */
  beforeScrape?(): Promise<void>;
  /** The exposition when it is more than this process's registry (a proxy's processes, summed). */
  metrics?(): Promise<string>;
}

/**
 * The operations endpoints shared by proxy and worker:
 * - `/healthz`: 200 while the process runs (liveness: it answers, so the event loop is not stuck);
 * - `/readyz`: 200 `ok` when every check holds, else 503 naming the failed checks;
 * - `/metrics`: the Prometheus text exposition of this process's registry (or of its processes).
 * Fastify's request logging is off: probes and scrapes every few seconds would drown the
 * one-line-per-request log.
 */
export function buildOpsApp(opts: OpsHttpOptions): FastifyInstance {
  const app = Fastify({ logger: false });
  app.get('/healthz', async (_req, reply) => reply.type('text/plain').send('ok\n'));
  app.get('/readyz', async (_req, reply) => {
    const results = await Promise.all(opts.checks.map(c => c.ok()));
    const failed = opts.checks.filter((_, i) => !results[i]).map(c => c.name);
    if (failed.length > 0) return reply.code(503).type('text/plain').send(`not ready: ${failed.join(', ')}\n`);
    return reply.type('text/plain').send('ok\n');
  });
  app.get('/metrics', async (_req, reply) => {
    await opts.beforeScrape?.();
    return reply.type(registry.contentType).send(await (opts.metrics ? opts.metrics() : registry.metrics()));
  });
  return app;
}

/**
 * Listen on `addr`. A failure (port taken, e.g. by a second plugin sidecar of the same pod left
 * on the default) is logged and the process goes on serving its socket or queue: the plugin
 * contract comes first. Returns the bound address, or undefined.
 */
export async function listenOps(app: FastifyInstance, addr: HttpAddress, log: Logger): Promise<string | undefined> {
  try {
    const url = await app.listen({ host: addr.host, port: addr.port });
    const bound = app.server.address();
    const where = bound && typeof bound === 'object' ? `${bound.address.includes(':') ? `[${bound.address}]` : bound.address}:${bound.port}` : url;
    log.info({ http: where }, 'http listening');
    return where;
  } catch (err) {
    log.error(
      { err: (err as Error).message, http: `${addr.host}:${addr.port}` },
      'cannot listen for /healthz, /readyz and /metrics (CMP_OFFLOAD_HTTP_ADDR); serving without them',
    );
    return undefined;
  }
}
