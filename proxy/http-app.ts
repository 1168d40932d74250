import fs from 'node:fs';
import type { FastifyInstance } from 'fastify';
import type { RedisClient } from '../cmp/queue/redis-connection.js';
import { metrics } from '../cmp/observe/metrics.js';
import { hasBearer } from '../cmp/observe/bearer.js';
import { buildOpsApp, type ReadinessCheck } from '../cmp/observe/ops-http.js';
import { refreshRedisGauges } from '../cmp/observe/redis-memory.js';
import type { MemoryCache } from '../cmp/cache/memory-cache.js';
import { allAppPaths, noAppPaths, viewOf, type AppPathsStore } from '../cmp/cache/app-paths.js';
import { GENERATE_PATHS_ANNOTATION } from '../cmp/cache/generate-paths.js';

export interface ProxyHttpDeps {
  /** The plugin socket; ready only while we listen on it and the file is there. */
  socketPath: string;
  listening(): boolean;
  /** CMP_OFFLOAD_PROXY_PROCESSES > 1: the metrics of every process, summed. */
  metrics?(): Promise<string>;
  /** Distributed mode: the proxy's Redis command connection, queue prefix and name. */
  redis?: { connection: RedisClient; prefix: string; queue: string };
  /** Standalone mode: the in-memory output cache, for its size gauges. */
  cache?: MemoryCache;
  /** Traced cache: the apps' manifest-generate-paths, counted in a gauge. */
  paths?: AppPathsStore;
  /** CMP_OFFLOAD_DASHBOARD_TOKEN: with `paths`, serve them as JSON behind this bearer token. */
  token?: string;
}

/** How long the count of apps with a value is reused in distributed mode, where it scans Redis. */
const PATHS_GAUGE_MS = 60_000;

/**
 * The proxy's HTTP app: /healthz, /readyz (the socket listens; Redis is connected in distributed
 * mode), /metrics (with the queue depth of the plugin's queue and Redis' memory read at scrape
 * time) and, with the traced cache and a token, /generate-paths.
 */
export function buildProxyHttpApp(deps: ProxyHttpDeps): FastifyInstance {
  const checks: ReadinessCheck[] = [{ name: 'socket', ok: () => deps.listening() && isSocket(deps.socketPath) }];
  const redis = deps.redis;
  if (redis) checks.push({ name: 'redis', ok: () => redis.connection.status === 'ready' });
  const paths = deps.paths;
  let counted = -Infinity;
  const app = buildOpsApp({
    checks,
    ...(deps.metrics ? { metrics: deps.metrics } : {}),
    async beforeScrape() {
      if (deps.cache) {
        const { bytes, entries } = deps.cache.stats();
        metrics.cacheBytes.set(bytes);
        metrics.cacheEntries.set(entries);
      }
      if (redis) {
        metrics.redisConnected.set(redis.connection.status === 'ready' ? 1 : 0);
        await refreshRedisGauges(redis.connection, redis.prefix, redis.queue);
      }
      if (paths && (!redis || (Date.now() - counted >= PATHS_GAUGE_MS && redis.connection.status === 'ready'))) {
        try {
          metrics.generatePathsApps.set((await allAppPaths(paths)).filter(p => p.value !== undefined).length);
          counted = Date.now();
        } catch {
          // Scrapes must not fail because Redis is away: the gauge keeps its last value.
        }
      }
    },
  });
  if (paths && deps.token) servePaths(app, paths, deps.token);
  return app;
}

/**
 * `/generate-paths` (every app) and `/generate-paths/:app` as JSON, for a dashboard or a
 * script that applies the annotation. They name apps, repositories and paths, which the rest
 * of the ops port never shows: like the worker's queue dashboard, only with the token.
 */
function servePaths(app: FastifyInstance, paths: AppPathsStore, token: string): void {
  app.addHook('onRequest', async (req, reply) => {
    if (!req.url.startsWith('/generate-paths') || hasBearer(req, token)) return;
    await reply.code(401).header('www-authenticate', 'Bearer').type('text/plain').send('dashboard token required\n');
  });
  app.get('/generate-paths', async (_req, reply) => reply.send({ annotation: GENERATE_PATHS_ANNOTATION, apps: await allAppPaths(paths) }));
  app.get<{ Params: { app: string } }>('/generate-paths/:app', async (req, reply) => {
    const view = viewOf(await paths.get(req.params.app));
    if (!view) return reply.code(404).send({ error: noAppPaths(req.params.app) });
    return reply.send({ annotation: GENERATE_PATHS_ANNOTATION, ...view });
  });
}

function isSocket(p: string): boolean {
  try {
    return fs.statSync(p).isSocket();
  } catch {
    return false; // nothing there or unreadable: not a socket to serve
  }
}
