import { parseArgs } from 'node:util';
import { GENERATE_PATHS_ANNOTATION } from '../cmp/cache/generate-paths.js';
import { compileOptions, type Options } from '../cmp/config/options.js';
import { messageOf } from '../cmp/errors.js';
import { createLogger, type Logger } from '../cmp/log.js';
import { metrics } from '../cmp/observe/metrics.js';
import { serveOpsInBackground } from '../cmp/observe/ops-in-background.js';
import { untilStopSignal } from '../cmp/process-start.js';
import { RedisAppPaths } from '../cmp/queue/app-paths-store.js';
import { KeySpace } from '../cmp/queue/keys.js';
import { parsePathsNotice } from '../cmp/queue/paths-notice.js';
import { connectRedis, type RedisClient } from '../cmp/queue/redis-connection.js';
import { Keeper } from './keeper.js';
import { KubeApi } from './kube-api.js';

/** A refused notice is logged at most this often (anyone who can publish on Redis could flood the log). */
const REFUSED_LOG_MS = 60_000;

/**
 * `cmp-offload keeper`: the composition root of the keeper process (distributed mode only: it
 * learns of runs through Redis). Subscribes to the proxies' signed notices, resyncs from the
 * records at start and every CMP_OFFLOAD_KEEPER_RESYNC, applies the annotation through the
 * Kubernetes API, serves /healthz, /readyz and /metrics, and stops on SIGTERM.
 */
export async function runKeeper(argv: string[]): Promise<number> {
  const env = { ...process.env };
  const options = keeperOptions(argv, env);
  if (typeof options === 'number') return options;
  const log = createLogger(env, 'cmp-offload-keeper');
  const stopSignal = untilStopSignal(log, 'keeper');
  const ro = options.redis!;
  const signingKey = ro.signingKey!;
  const keys = new KeySpace(ro.prefix);
  const ko = options.keeper;
  const onRedisError = (err: Error) => log.debug({ err: err.message }, 'redis connection error');
  const redis = connectRedis(ro, 'command', onRedisError);
  const subscriber = connectRedis(ro, 'blocking', onRedisError);
  const api = new KubeApi({ url: ko.apiUrl!, tokenFile: ko.apiTokenFile, caFile: ko.apiCaFile });
  const keeper = new Keeper(new RedisAppPaths(redis, signingKey, keys), api, ko, log);
  const subscribed = listenForNotices(subscriber, signingKey, keys, keeper, log);

  metrics.info.set({ role: 'keeper', plugin: '', mode: 'distributed' }, 1);
  const http = serveOpsInBackground(options.http, log, async () =>
    (await import('../cmp/observe/ops-http.js')).buildOpsApp({
      checks: [
        { name: 'redis', ok: () => redis.status === 'ready' },
        { name: 'paths-channel', ok: () => subscriber.status === 'ready' },
      ],
      async beforeScrape() {
        metrics.redisConnected.set(redis.status === 'ready' ? 1 : 0);
      },
    }),
  );
  // The start line once notices are heard (a notice published before would wait for the resync),
  // or after the Redis timeout: with Redis away the keeper still serves its probes and stops on SIGTERM.
  await Promise.race([subscribed, new Promise(resolve => setTimeout(resolve, ro.timeoutMs).unref())]);
  keeper.start();
  log.info(
    { redis: ro.redacted, api: ko.apiUrl, argocdNamespace: ko.argocdNamespace, graceMs: ko.graceMs, resyncMs: ko.resyncMs, dryRun: ko.dryRun, apiQps: ko.apiQps },
    `keeper: keeping ${GENERATE_PATHS_ANNOTATION} of the Applications our plugins serve${ko.dryRun ? ' (dry run: patching nothing)' : ''}`,
  );
  await stopSignal;
  await keeper.stop();
  await (await http)?.close();
  subscriber.disconnect();
  redis.disconnect();
  return 0;
}

/** The keeper's flags (written into `env`) and settings; the exit code when they are refused. */
function keeperOptions(argv: string[], env: NodeJS.ProcessEnv): Options | number {
  try {
    const { values } = parseArgs({
      args: argv,
      options: { 'dry-run': { type: 'boolean' }, loglevel: { type: 'string' }, logformat: { type: 'string' } },
      strict: true,
    });
    if (values['dry-run']) env.CMP_OFFLOAD_KEEPER_DRY_RUN = 'true';
    if (values.loglevel) env.ARGOCD_CMP_SERVER_LOGLEVEL = values.loglevel;
    if (values.logformat) env.ARGOCD_CMP_SERVER_LOGFORMAT = values.logformat;
    const options = compileOptions(env, { role: 'keeper' });
    if (!options.redis?.signingKey) throw new Error('cmp-offload keeper needs distributed mode: set CMP_OFFLOAD_REDIS_URL and CMP_OFFLOAD_SIGNING_KEY (or _FILE)');
    if (!options.keeper.apiUrl) throw new Error('cmp-offload keeper needs the Kubernetes API: run it in a pod (KUBERNETES_SERVICE_HOST) or set CMP_OFFLOAD_KEEPER_API_URL');
    return options;
  } catch (err) {
    process.stderr.write(`${messageOf(err)}\n`);
    return 1;
  }
}

/** The proxies' signed paths notices reach the keeper; resolves with whether the channel is subscribed. */
function listenForNotices(subscriber: RedisClient, signingKey: Buffer, keys: KeySpace, keeper: Keeper, log: Logger): Promise<boolean> {
  let refusedLogged = -Infinity;
  subscriber.on('message', (_channel: string, raw: string) => {
    const app = parsePathsNotice(signingKey, raw);
    metrics.keeperNotices.inc({ verdict: app === undefined ? 'refused' : 'accepted' });
    if (app !== undefined) return keeper.notify(app);
    if (Date.now() - refusedLogged < REFUSED_LOG_MS) return;
    refusedLogged = Date.now();
    log.warn('keeper: ignoring a paths notice that does not verify (not signed with CMP_OFFLOAD_SIGNING_KEY, or stale)');
  });
  // ioredis subscribes again by itself after a reconnect; the resync covers what was missed.
  return subscriber.subscribe(keys.pathsChannel()).then(
    () => true,
    err => {
      log.warn({ err: messageOf(err) }, 'paths channel not subscribed yet');
      return false;
    },
  );
}
