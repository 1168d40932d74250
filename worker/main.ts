import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Queue, UnrecoverableError } from 'bullmq';
import { IN_PROCESS, type RedisOptions } from '../cmp/config/options.js';
import { pluginSpecDigest, socketFileName } from '../cmp/config/plugin-config.js';
import { terminateAll } from '../cmp/exec/process-groups.js';
import { resetWorkRoot, startProcess, untilStopSignal } from '../cmp/process-start.js';
import { metrics } from '../cmp/observe/metrics.js';
import { serveOpsInBackground } from '../cmp/observe/ops-in-background.js';
import { shutdownTracing } from '../cmp/observe/tracing.js';
import { parseCancel } from '../cmp/queue/cancel.js';
import { KeySpace, queueNameOf } from '../cmp/queue/keys.js';
import { connectRedis, type RedisClient } from '../cmp/queue/redis-connection.js';
import { logFailed, type Logger } from '../cmp/log.js';
import type { Engine } from '../cmp/plugin/engine.js';
import type { Execute } from './execute.js';
import { createProcessor, type AbortReason } from './processor.js';
import { RecordedRuns, RecordingWorker } from './recorded-runs.js';
import { runnerExecute, type RunnerClientOptions } from './runner-client.js';
import { RunnerGate } from './runner-gate.js';

/**
 * `cmp-offload worker`: the composition root of a worker process. Reads the same plugin.yaml as
 * the proxy, consumes the plugin's queue with CMP_OFFLOAD_CONCURRENCY jobs at once, obeys
 * cross-process cancel requests, has each job's plugin commands run by the runner on
 * CMP_OFFLOAD_RUNNER_SOCKET (or in-process where configured so), and on SIGTERM stops fetching, lets running jobs finish within
 * CMP_OFFLOAD_SHUTDOWN_GRACE, then cancels them (they are retried elsewhere) and kills what
 * their commands left. Returns the process exit code.
 */
export async function runWorker(argv: string[]): Promise<number> {
  const started = await startWorkerProcess(argv);
  if (typeof started === 'number') return started;
  const { log, engine } = started;
  const stopSignal = untilStopSignal(log, 'no new jobs');
  const { options } = engine;
  // Tracing (off unless ARGOCD_CMP_SERVER_OTLP_ADDRESS is set: then, and only then, the exporter is loaded).
  if (options.otlp) await (await import('../cmp/observe/otel-sdk.js')).startTracing(options.otlp, 'cmp-offload-worker', log);
  const gate = options.runnerSocket === IN_PROCESS ? undefined : new RunnerGate(options.runnerSockets, options.redis!.timeoutMs, log);
  const localExecute = gate ? undefined : await inProcessExecutor(engine, log);
  const ro = options.redis!;
  const w: WorkerSetting = {
    log,
    engine,
    ro,
    gate,
    queue: queueNameOf(socketFileName(engine.config)),
    keys: new KeySpace(ro.prefix),
    onRedisError: (err: Error) => log.debug({ err: err.message }, 'redis connection error'),
  };

  const redis = connectRedis(ro, 'command', w.onRedisError);
  const specDigest = pluginSpecDigest(engine.config);
  const execute: Execute = gate ? gate.watch(runnerExecute(runnerClientOptions(w, specDigest))) : localExecute!;
  const { worker, workerConnection } = startJobWorker(w, redis, execute, specDigest);
  let stopping = false;
  const fetching = gate ? gate.start(worker) : Promise.resolve(true);
  const subscriber = await listenForCancels(ro, w.keys, ro.signingKey!, w.queue, worker, log, w.onRedisError);
  await warnUntilRedisReady(w, worker);

  metrics.info.set({ role: 'worker', plugin: w.queue, mode: 'distributed' }, 1);
  metrics.concurrencyLimit.set(options.concurrency);
  const ops = serveWorkerOps(w, redis, workerConnection, worker, () => stopping);
  const ready = () =>
    log.info(
      { queue: w.queue, redis: ro.redacted, prefix: ro.prefix, concurrency: options.concurrency, runner: gate ? options.runnerSockets.join(',') : options.runnerSocket },
      'worker ready',
    );
  void fetching.then(up => up && ready());

  await stopSignal;

  stopping = true;
  gate?.stop();
  await drainJobs(worker, options.shutdownGraceMs, log);
  await shutdownTracing().catch(logFailed(log, 'stopping: flushing the last spans'));
  await (await ops.http)?.close().catch(logFailed(log, 'stopping: closing the ops server'));
  await ops.dashboardQueue?.close().catch(logFailed(log, 'stopping: closing the dashboard queue'));
  for (const c of [ops.dashboardConnection, subscriber, workerConnection, redis]) c?.disconnect();
  await fs.rm(options.workRoot, { recursive: true, force: true }).catch(logFailed(log, 'stopping: removing the work root'));
  log.info('stopped');
  log.flush();
  return 0;
}

/** What the parts of a worker process share. */
interface WorkerSetting {
  log: Logger;
  engine: Engine;
  ro: RedisOptions;
  /** Set unless the plugin commands run in-process: fetching waits for the pod's runners. */
  gate: RunnerGate | undefined;
  /** The plugin's queue. */
  queue: string;
  keys: KeySpace;
  onRedisError: (err: Error) => void;
}

function runnerClientOptions({ engine: { options }, log }: WorkerSetting, specDigest: string): RunnerClientOptions {
  return {
    socketPaths: options.runnerSockets,
    concurrency: options.concurrency,
    specDigest,
    outputBytes: options.limits.outputBytes,
    maxPaths: options.cache.trace.maxPaths,
    execTimeoutMs: options.execTimeoutMs,
    fatalTimeoutMs: options.execFatalTimeoutMs,
    log,
  };
}

/** The BullMQ worker of the plugin's queue, with its processor and event logs; it fetches at once only without a runner. */
function startJobWorker(w: WorkerSetting, redis: RedisClient, execute: Execute, specDigest: string): { worker: RecordingWorker; workerConnection: RedisClient } {
  const { log, engine, ro, gate, queue } = w;
  const { options } = engine;
  // Each job's `job` line, metric and span wait for BullMQ to record its end (or fail to).
  const runs = new RecordedRuns();
  const processor = createProcessor({
    engine,
    execute,
    redis,
    keys: w.keys,
    queue,
    specDigest,
    signingKey: ro.signingKey!,
    log,
    jobAttempts: ro.jobAttempts,
    runs,
    ...(gate ? { runner: { down: () => gate.down, unreachable: () => gate.unreachable() } } : {}),
  });
  const workerConnection = connectRedis(ro, 'blocking', w.onRedisError);
  const worker = new RecordingWorker(queue, processor, {
    connection: workerConnection,
    prefix: ro.prefix,
    name: os.hostname(),
    concurrency: options.concurrency,
    lockDuration: ro.lockDurationMs,
    stalledInterval: ro.stalledIntervalMs,
    // Runs lost with their worker count toward CMP_OFFLOAD_JOB_ATTEMPTS: the processor gives a
    // job up (signed, with a clear text) when it would start a run beyond it. This bound is
    // BullMQ's own backstop behind that check, never reached first.
    maxStalledCount: ro.jobAttempts,
    // With a runner, jobs are fetched once it accepts connections (RunnerGate).
    autorun: !gate,
  }, runs);
  worker.on('error', err => log.warn({ err: err.message }, 'worker error'));
  // Plugin failure texts go to the caller (they may quote plugin output); only infrastructure errors are logged.
  worker.on('failed', (job, err) => {
    const infra = !(err instanceof UnrecoverableError);
    log.info({ jobId: job?.id, attempts: job?.attemptsMade, ...(infra ? { err: err.message } : {}) }, 'job failed');
  });
  // A job whose lock we lost will run elsewhere: stop our copy (BullMQ's documented pattern).
  worker.on('lockRenewalFailed', ids => ids.forEach(id => worker.cancelJob(id, 'shutdown' satisfies AbortReason)));
  return { worker, workerConnection };
}

/** Wait a while for the worker's Redis connection; say so when it is not there yet (it keeps trying). */
async function warnUntilRedisReady({ ro, log }: WorkerSetting, worker: RecordingWorker): Promise<void> {
  const connected = await Promise.race([
    worker.waitUntilReady().then(() => true, () => false),
    new Promise<boolean>(resolve => setTimeout(() => resolve(false), ro.timeoutMs).unref()),
  ]);
  if (!connected) log.warn({ redis: ro.redacted }, 'Redis is not reachable yet; jobs are fetched once it is');
}

/** The ops HTTP server (health, metrics, and the dashboard when its token is set), started in the background. */
function serveWorkerOps(w: WorkerSetting, redis: RedisClient, workerConnection: RedisClient, worker: RecordingWorker, stopping: () => boolean) {
  const { ro, gate, queue, engine: { options } } = w;
  // The dashboard's Queue gets its own connection: the command one refuses commands while connecting.
  const dashboardConnection = options.dashboardToken ? connectRedis(ro, 'blocking', w.onRedisError) : undefined;
  const dashboardQueue = dashboardConnection ? new Queue(queue, { connection: dashboardConnection, prefix: ro.prefix }) : undefined;
  dashboardQueue?.on('error', w.onRedisError);
  const http = serveOpsInBackground(options.http, w.log, async () =>
    (await import('./http-app.js')).buildWorkerHttpApp({
      redis,
      blocking: workerConnection,
      prefix: ro.prefix,
      queue,
      // Paused because its runner is down, the worker is not ready for the runner's sake only; and
      // the runner counts as up once fetching has resumed, not merely once its socket accepts.
      running: () => !stopping() && (worker.isRunning() || (gate?.down ?? false)),
      ...(gate ? { runnerUp: async () => !gate.down && (await gate.accept(1_000)) } : {}),
      ...(dashboardQueue && options.dashboardToken ? { dashboard: { token: options.dashboardToken, queue: dashboardQueue } } : {}),
    }),
  );
  return { http, dashboardConnection, dashboardQueue };
}

/** Start-up checks of a worker's settings and its work root; the exit code when they fail. */
async function startWorkerProcess(argv: string[]): Promise<Awaited<ReturnType<typeof startProcess>> | number> {
  try {
    const started = await startProcess(argv, 'worker', options => {
      if (!options.redis) throw new Error('cmp-offload worker needs CMP_OFFLOAD_REDIS_URL');
      if (!options.redis.signingKey) {
        throw new Error('cmp-offload worker needs a signing key: set CMP_OFFLOAD_SIGNING_KEY or CMP_OFFLOAD_SIGNING_KEY_FILE');
      }
      if (options.runnerSocket === undefined) {
        throw new Error(
          `cmp-offload worker needs CMP_OFFLOAD_RUNNER_SOCKET: the socket path of the runner container that runs plugin commands ` +
            `without credentials, or ${IN_PROCESS} to run them inside the worker (single-tenant installs only: plugin code can then read the worker's credentials)`,
        );
      }
    });
    await resetWorkRoot(started.engine.options.workRoot);
    return started;
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    return 1;
  }
}

/**
 * CMP_OFFLOAD_RUNNER_SOCKET=in-process: the executor runs in the worker. Loaded only then (a
 * worker with a runner starts without it), warmed, and its recorder and reaper checked at start.
 */
async function inProcessExecutor(engine: Engine, log: Logger): Promise<Execute> {
  const [exec, pool, reaper] = await Promise.all([import('../cmp/plugin/execute.js'), import('../cmp/tar/extract-pool.js'), import('../cmp/exec/reaper.js')]);
  pool.extractPool.warm();
  // Find out now whether cmp-reap works, not in the first job's path.
  void reaper.usableReaper();
  // The traced commands run here too: whether the recorder works is said once, at start.
  await (await import('../cmp/trace/tracer-probe.js')).checkRecorder(engine, log);
  log.warn('plugin commands run inside the worker (CMP_OFFLOAD_RUNNER_SOCKET=in-process): they can read its Redis URL and signing key; trust every repository or use a runner');
  return async (req, tgz, ctx, sink) => {
    if (typeof tgz === 'string') return exec.executeRequest(engine, req, tgz, ctx, sink);
    // A tarball the job carried: the executor extracts from a file.
    const tgzPath = path.join(engine.options.workRoot, `${randomUUID()}.tgz`);
    await fs.writeFile(tgzPath, tgz, { mode: 0o600 });
    try {
      return await exec.executeRequest(engine, req, tgzPath, ctx, sink);
    } finally {
      await fs.rm(tgzPath, { force: true });
    }
  };
}

/** Cancel requests of the proxies (signed, on the cancel channel) stop this worker's copy of a job. */
async function listenForCancels(
  ro: RedisOptions,
  keys: KeySpace,
  signingKey: Buffer,
  queue: string,
  worker: RecordingWorker,
  log: Logger,
  onRedisError: (err: Error) => void,
): Promise<RedisClient> {
  const subscriber = connectRedis(ro, 'blocking', onRedisError);
  subscriber.on('message', (_channel: string, raw: string) => {
    const msg = parseCancel(signingKey, raw);
    if (msg?.queue === queue && worker.cancelJob(msg.jobId, msg.reason satisfies AbortReason)) {
      log.info({ jobId: msg.jobId, reason: msg.reason }, 'job cancelled by its callers');
    }
  });
  await subscriber.subscribe(keys.cancelChannel()).catch(err => log.warn({ err: (err as Error).message }, 'cancel channel not subscribed yet'));
  // ioredis re-subscribes by itself after a reconnect.
  return subscriber;
}

/**
 * Shutdown: stop fetching and let running jobs finish within CMP_OFFLOAD_SHUTDOWN_GRACE, then
 * cancel them (they are retried elsewhere) and kill what their commands left.
 */
async function drainJobs(worker: RecordingWorker, graceMs: number, log: Logger): Promise<void> {
  const closing = worker.close();
  const grace = new Promise<'timeout'>(resolve => setTimeout(() => resolve('timeout'), graceMs).unref());
  if ((await Promise.race([closing.then(() => 'done' as const), grace])) === 'timeout') {
    log.warn('grace period over: cancelling running jobs (they will be retried)');
    worker.cancelAllJobs('shutdown' satisfies AbortReason);
    await terminateAll(5_000);
    await Promise.race([closing, new Promise(resolve => setTimeout(resolve, 5_000).unref())]);
  }
  await terminateAll(5_000);
}
