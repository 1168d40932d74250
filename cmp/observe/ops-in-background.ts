import type { FastifyInstance } from 'fastify';
import type { HttpAddress } from '../config/options.js';
import type { Logger } from '../log.js';

/**
 * Start a process's ops HTTP server (metrics, health, dashboard) in the background, so that
 * signal handling and serving start at once; fastify is loaded only here. `build` imports and
 * builds the role's app. A server that fails to start is logged and the process serves without
 * it. Resolves with the app to close at shutdown, or undefined.
 */
export function serveOpsInBackground(
  addr: HttpAddress | undefined,
  log: Logger,
  build: () => Promise<FastifyInstance>,
): Promise<FastifyInstance | undefined> {
  if (!addr) return Promise.resolve(undefined);
  return (async () => {
    const [app, { listenOps }] = await Promise.all([build(), import('./ops-http.js')]);
    await listenOps(app, addr, log);
    return app;
  })().catch((err: unknown) => {
    log.error({ err: (err as Error).message }, 'the HTTP server failed to start; serving without it');
    return undefined;
  });
}
