import fs from 'node:fs/promises';
import os from 'node:os';
import { Queue, UnrecoverableError } from 'bullmq';
import { IN_PROCESS } from '../cmp/config/options.js';
import { pluginSpecDigest, socketFileName } from '../cmp/config/plugin-config.js';
import { terminateAll } from '../cmp/exec/process-groups.js';
import { resetWorkRoot, startProcess, untilStopSignal } from '../cmp/process-start.js';
import { metrics } from '../cmp/observe/metrics.js';
import { serveOpsInBackground } from '../cmp/observe/ops-in-background.js';
import { shutdownTracing } from '../cmp/observe/tracing.js';
import { parseCancel } from '../cmp/queue/cancel.js';
import { KeySpace, queueNameOf } from '../cmp/queue/keys.js';
import { connectRedis } from '../cmp/queue/redis-connection.js';
import type { Logger } from '../cmp/log.js';
import { createProcessor, InfraError, RunnerUnreachable, type AbortReason, type Execute } from './processor.js';
import { RecordedRuns, RecordingWorker } from './recorded-runs.js';
import { runnerAccepts, runnerExecute } from './runner/client.js';

/**
 * `cmp-offload worker`: the composition root of a worker process. Reads the same plugin.yaml as
 * the proxy, consumes the plugin's queue with CMP_OFFLOAD_CONCURRENCY jobs at once, obeys
 * cross-process cancel requests, has each job's plugin commands run by the runner on
 * CMP_OFFLOAD_RUNNER_SOCKET (or in-process where configured so), and on SIGTERM stops fetching, lets running jobs finish within
 * CMP_OFFLOAD_SHUTDOWN_GRACE, then cancels them (they are retried elsewhere) and kills what
 * their commands left. Returns the process exit code.
 */
export async function runWorker(argv: string[]): Promise<number> {
  let started;
  try {
    started = await startProcess(argv, 'worker', options => {
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
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    return 1;
  }
  const { log, engine } = started;
  const stopSignal = untilStopSignal(log, 'no new jobs');
  const { options } = engine;
  const runnerSocket = options.runnerSocket === IN_PROCESS ? undefined : options.runnerSocket!;
  const runnerSockets = options.runnerSockets;
  // Up when every runner of the pod accepts (one restarting pauses fetching: see runnerState).
  const runnersAccept = async (timeoutMs: number) => (await Promise.all(runnerSockets.map(p => runnerAccepts(p, timeoutMs)))).every(Boolean);
  // Tracing (off unless ARGOCD_CMP_SERVER_OTLP_ADDRESS is set: then, and only then, the exporter is loaded).
  if (options.otlp) {
    (await import('../cmp/observe/otlp-exporter.js')).startOtlpTracing(options.otlp, 'cmp-offload-worker', log);
    log.info({ address: options.otlp.address, insecure: options.otlp.insecure }, 'tracing: exporting spans over OTLP/gRPC');
  }
  // The in-process executor is loaded only when used: a worker with a runner starts without it.
  let executeRequest: typeof import('../cmp/plugin/execute.js').executeRequest | undefined;
  if (!runnerSocket) {
    const [exec, pool, reaper] = await Promise.all([import('../cmp/plugin/execute.js'), import('../cmp/tar/extract-pool.js'), import('../cmp/exec/reaper.js')]);
    executeRequest = exec.executeRequest;
    pool.extractPool.warm();
    // Find out now whether cmp-reap works, not in the first job's path.
    void reaper.usableReaper();
    // The traced commands run here too: whether the recorder works is said once, at start.
    await (await import('../cmp/trace/tracer-probe.js')).checkRecorder(engine, log);
    log.warn('plugin commands run inside the worker (CMP_OFFLOAD_RUNNER_SOCKET=in-process): they can read its Redis URL and signing key; trust every repository or use a runner');
  }
  const ro = options.redis!;
  const signingKey = ro.signingKey!;
  const queue = queueNameOf(socketFileName(engine.config));
  const keys = new KeySpace(ro.prefix);
  const onRedisError = (err: Error) => log.debug({ err: err.message }, 'redis connection error');

  const redis = connectRedis(ro, 'command', onRedisError);
  const specDigest = pluginSpecDigest(engine.config);
  const execute: Execute = runnerSocket
    ? runnerExecute({
        socketPaths: runnerSockets,
        concurrency: options.concurrency,
        specDigest,
        outputBytes: options.limits.outputBytes,
        maxPaths: options.cache.trace.maxPaths,
        execTimeoutMs: options.execTimeoutMs,
        fatalTimeoutMs: options.execFatalTimeoutMs,
        log,
      })
    : (req, tgzPath, ctx, sink) => executeRequest!(engine, req, tgzPath, ctx, sink);
  // Set once the worker exists: the runner's state pauses and resumes its fetching.
  let runnerState: { down(): boolean; unreachable(): void } | undefined;
  // Each job's `job` line, metric and span wait for BullMQ to record its end (or fail to).
  const runs = new RecordedRuns();
  const executeChecked: Execute = runnerSocket
    ? async (req, tgzPath, ctx, sink) => {
        try {
          return await execute(req, tgzPath, ctx, sink);
        } catch (err) {
          // The runner went away mid-run (that run counts: it may be what killed it): stop
          // fetching if it is gone for good, rather than fail the next jobs at once.
          if (err instanceof InfraError && !(err instanceof RunnerUnreachable)) {
            void runnersAccept(1_000).then(up => up || runnerState?.unreachable());
          }
          throw err;
        }
      }
    : execute;
  const processor = createProcessor({
    engine,
    execute: executeChecked,
    redis,
    keys,
    queue,
    specDigest,
    signingKey,
    log,
    jobAttempts: ro.jobAttempts,
    runs,
    ...(runnerSocket ? { runner: { down: () => runnerState?.down() ?? false, unreachable: () => runnerState?.unreachable() } } : {}),
  });
  const workerConnection = connectRedis(ro, 'blocking', onRedisError);
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
    // With a runner, jobs are fetched once it accepts connections (see below).
    autorun: !runnerSocket,
  }, runs);
  worker.on('error', err => log.warn({ err: err.message }, 'worker error'));
  // Plugin failure texts go to the caller (they may quote plugin output); only infrastructure errors are logged.
  worker.on('failed', (job, err) => {
    const infra = !(err instanceof UnrecoverableError);
    log.info({ jobId: job?.id, attempts: job?.attemptsMade, ...(infra ? { err: err.message } : {}) }, 'job failed');
  });
  // A job whose lock we lost will run elsewhere: stop our copy (BullMQ's documented pattern).
  worker.on('lockRenewalFailed', ids => ids.forEach(id => worker.cancelJob(id, 'shutdown' satisfies AbortReason)));
  let stopping = false;
  // The runner is another container of the pod and starts at the same time: a job fetched before
  // it listens would fail and wait for its retry. Fetch once it accepts connections, while the
  // rest of the start goes on.
  const runnerWait = new AbortController();
  const fetching = runnerSocket
    ? untilRunnerAccepts(runnerSockets, ro.timeoutMs, runnerWait.signal, log).then(up => {
        if (!up || stopping) return false;
        worker.run().catch(err => log.warn({ err: (err as Error).message }, 'worker error'));
        return true;
      })
    : Promise.resolve(true);

  // A runner that stops accepting connections (dead, restarting) pauses fetching: jobs go to
  // workers whose runner works instead of failing here one after the other.
  let runnerDown = false;
  runnerState = {
    down: () => runnerDown,
    unreachable: () => {
      if (runnerDown || stopping || !runnerSocket) return;
      runnerDown = true;
      // Not waiting for the running jobs: they end on their own.
      void worker.pause(true).catch(err => log.warn({ err: (err as Error).message }, 'worker error'));
      log.warn({ runner: runnerSockets.join(',') }, 'the runner does not accept connections: fetching no jobs until it does (CMP_OFFLOAD_RUNNER_SOCKET)');
      void untilRunnerAccepts(runnerSockets, Number.POSITIVE_INFINITY, runnerWait.signal, log, RUNNER_RECOVERY_RETRY_MS).then(async up => {
        if (!up || stopping) return;
        runnerDown = false;
        await worker.resume();
        log.info({ runner: runnerSockets.join(',') }, 'the runner accepts connections again: fetching jobs');
      });
    },
  };

  const subscriber = connectRedis(ro, 'blocking', onRedisError);
  subscriber.on('message', (_channel: string, raw: string) => {
    const msg = parseCancel(signingKey, raw);
    if (msg?.queue === queue && worker.cancelJob(msg.jobId, msg.reason satisfies AbortReason)) {
      log.info({ jobId: msg.jobId, reason: msg.reason }, 'job cancelled by its callers');
    }
  });
  await subscriber.subscribe(keys.cancelChannel()).catch(err => log.warn({ err: (err as Error).message }, 'cancel channel not subscribed yet'));
  // ioredis re-subscribes by itself after a reconnect.

  const connected = await Promise.race([
    worker.waitUntilReady().then(() => true, () => false),
    new Promise<boolean>(resolve => setTimeout(() => resolve(false), ro.timeoutMs).unref()),
  ]);
  if (!connected) log.warn({ redis: ro.redacted }, 'Redis is not reachable yet; jobs are fetched once it is');

  metrics.info.set({ role: 'worker', plugin: queue, mode: 'distributed' }, 1);
  metrics.concurrencyLimit.set(options.concurrency);
  // The dashboard's Queue gets its own connection: the command one refuses commands while connecting.
  const dashboardConnection = options.dashboardToken ? connectRedis(ro, 'blocking', onRedisError) : undefined;
  const dashboardQueue = dashboardConnection ? new Queue(queue, { connection: dashboardConnection, prefix: ro.prefix }) : undefined;
  dashboardQueue?.on('error', onRedisError);
  const http = serveOpsInBackground(options.http, log, async () =>
    (await import('./http-app.js')).buildWorkerHttpApp({
      redis,
      blocking: workerConnection,
      prefix: ro.prefix,
      queue,
      // Paused because its runner is down, the worker is not ready for the runner's sake only; and
      // the runner counts as up once fetching has resumed, not merely once its socket accepts.
      running: () => !stopping && (worker.isRunning() || runnerDown),
      ...(runnerSocket ? { runnerUp: async () => !runnerDown && (await runnersAccept(1_000)) } : {}),
      ...(dashboardQueue && options.dashboardToken ? { dashboard: { token: options.dashboardToken, queue: dashboardQueue } } : {}),
    }),
  );
  const ready = () =>
    log.info({ queue, redis: ro.redacted, prefix: ro.prefix, concurrency: options.concurrency, runner: runnerSocket ? runnerSockets.join(',') : options.runnerSocket }, 'worker ready');
  void fetching.then(up => up && ready());

  await stopSignal;

  stopping = true;
  runnerWait.abort();
  const closing = worker.close();
  const grace = new Promise<'timeout'>(resolve => setTimeout(() => resolve('timeout'), options.shutdownGraceMs).unref());
  if ((await Promise.race([closing.then(() => 'done' as const), grace])) === 'timeout') {
    log.warn('grace period over: cancelling running jobs (they will be retried)');
    worker.cancelAllJobs('shutdown' satisfies AbortReason);
    await terminateAll(5_000);
    await Promise.race([closing, new Promise(resolve => setTimeout(resolve, 5_000).unref())]);
  }
  await terminateAll(5_000);
  await shutdownTracing().catch(() => {});
  await (await http)?.close().catch(() => {});
  await dashboardQueue?.close().catch(() => {});
  dashboardConnection?.disconnect();
  subscriber.disconnect();
  workerConnection.disconnect();
  redis.disconnect();
  await fs.rm(options.workRoot, { recursive: true, force: true }).catch(() => {});
  log.info('stopped');
  log.flush();
  return 0;
}

/** How often a starting worker tries the runner's socket: starting containers are fast, and a try costs a failed connect. */
const RUNNER_RETRY_MS = 10;
/** How often a worker whose runner went away tries its socket again (a restarted container takes a while). */
const RUNNER_RECOVERY_RETRY_MS = 100;

/**
 * Resolve true once the runner at each of `socketPaths` accepts a connection, false if `signal`
 * aborts first. Says once, after `warnAfterMs`, that jobs wait for the runner.
 */
async function untilRunnerAccepts(socketPaths: readonly string[], warnAfterMs: number, signal: AbortSignal, log: Logger, retryMs = RUNNER_RETRY_MS): Promise<boolean> {
  const warnAt = Date.now() + warnAfterMs;
  let warned = false;
  const waiting = new Set(socketPaths);
  while (!signal.aborted) {
    for (const p of [...waiting]) if (await runnerAccepts(p, 1_000)) waiting.delete(p);
    if (waiting.size === 0) return !signal.aborted;
    if (!warned && Date.now() >= warnAt) {
      warned = true;
      log.warn({ runner: [...waiting].join(',') }, 'the runner does not accept connections yet (CMP_OFFLOAD_RUNNER_SOCKET); jobs are fetched once it does');
    }
    await new Promise(resolve => setTimeout(resolve, retryMs));
  }
  return false;
}
