import type { Queue } from 'bullmq';
import type { FastifyInstance } from 'fastify';
import type { RedisClient } from '../cmp/queue/redis-connection.js';
import { metrics } from '../cmp/observe/metrics.js';
import { buildOpsApp } from '../cmp/observe/ops-http.js';
import { refreshRedisGauges } from '../cmp/observe/redis-memory.js';

export interface WorkerHttpDeps {
  /** The command connection (blobs, results) and the worker's blocking connection. */
  redis: RedisClient;
  blocking: RedisClient;
  prefix: string;
  queue: string;
  /** False once the worker stops fetching jobs (shutdown). */
  running(): boolean;
  /** Runner mode: whether the runner's socket accepts a connection. */
  runnerUp?(): Promise<boolean>;
  /** Set to mount the bull-board dashboard at /queues behind this token. */
  dashboard?: { token: string; queue: Queue };
}

/**
 * The worker's HTTP app: /healthz, /readyz (both Redis connections up, the worker fetching
 * jobs and, in runner mode, the runner's socket accepting connections), /metrics (with the queue depth and Redis' memory read at scrape time) and the optional dashboard.
 */
export async function buildWorkerHttpApp(deps: WorkerHttpDeps): Promise<FastifyInstance> {
  const app = buildOpsApp({
    checks: [
      { name: 'redis', ok: () => deps.redis.status === 'ready' && deps.blocking.status === 'ready' },
      { name: 'worker', ok: () => deps.running() },
      ...(deps.runnerUp ? [{ name: 'runner', ok: deps.runnerUp }] : []),
    ],
    async beforeScrape() {
      metrics.redisConnected.set(deps.redis.status === 'ready' && deps.blocking.status === 'ready' ? 1 : 0);
      await refreshRedisGauges(deps.redis, deps.prefix, deps.queue);
    },
  });
  if (deps.dashboard) {
    // Loaded only when enabled: bull-board and its static UI are not needed otherwise.
    const { mountDashboard } = await import('../cmp/observe/dashboard.js');
    await mountDashboard(app, [deps.dashboard.queue], deps.dashboard.token);
  }
  return app;
}
