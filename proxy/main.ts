import cluster from 'node:cluster';
import fs from 'node:fs/promises';
import * as grpc from '@grpc/grpc-js';
import { discoveryConfigured, pluginSpecDigest, socketFileName } from '../cmp/config/plugin-config.js';
import { terminateAll } from '../cmp/exec/process-groups.js';
import { becomeNonDumpable } from '../cmp/exec/no-dump.js';
import { usableReaper } from '../cmp/exec/reaper.js';
import { logFailed } from '../cmp/log.js';
import { resetWorkRoot, startProcess, untilStopSignal, type Started } from '../cmp/process-start.js';
import { metrics } from '../cmp/observe/metrics.js';
import { serveOpsInBackground } from '../cmp/observe/ops-in-background.js';
import { shutdownTracing } from '../cmp/observe/tracing.js';
import { checkRecorder } from '../cmp/trace/tracer-probe.js';
import type { Dispatcher } from './dispatch/dispatcher.js';
import { LocalDispatcher } from './dispatch/local-dispatcher.js';
import type { QueueDispatcher } from './dispatch/queue-dispatcher.js';
import { buildGrpcServer, drainGrpcServer } from './grpc-server.js';
import { IndexMemo } from './ingest/index-memo.js';
import { SpoolStore } from './ingest/spool-store.js';
import { dropGrpcBindNoise, listenFailure } from './listen-error.js';
import type { IngestProcesses } from './processes/coordinator.js';
import type { StreamingRpcDeps } from './rpc/streaming-rpc.js';

/** What serves the socket: this process's gRPC server, or the ingest processes (CMP_OFFLOAD_PROXY_PROCESSES > 1). */
interface Front {
  listen(): Promise<void>;
  inflight(): number;
  /** Stop accepting, drain within the grace period, cancel the rest. */
  drain(): Promise<void>;
}

/** A stop signal (SIGTERM, SIGINT), or `stopNow` when an ingest process failed (`failed`). */
interface Stop {
  stopped: Promise<void>;
  stopNow(): void;
  failed: boolean;
}

/** What the steps of one proxy run share, from start-up to shutdown. */
interface ProxyRun extends Started {
  options: Started['engine']['options'];
  stop: Stop;
  socketPath: string;
  pluginName: string;
  dispatcher: Dispatcher;
  /** Standalone: the recorder's probe, whose command is ours to wait for. */
  recorderChecked: Promise<void> | undefined;
  front: Front;
  ingest: IngestProcesses | undefined;
  /** The socket accepts (the ops server's readiness). */
  listening: boolean;
}

/**
 * `cmp-offload proxy`: the composition root. Starts like argocd-cmp-server (docs/argo-contract.md#start-up):
 * read and validate plugin.yaml, remove a stale socket, listen, reset the work root, serve.
 * Returns the process exit code once the server has shut down.
 */
export async function runProxy(argv: string[]): Promise<number> {
  dropGrpcBindNoise();
  if (cluster.isWorker) return (await import('./processes/ingest-process.js')).runIngestProcess(argv);
  const started = await startProxy(argv);
  if (!started) return 1;
  const run = await prepareProxy(started);
  const serving = await listen(run);
  if (serving === undefined) return 1;
  run.listening = serving;
  let http: ReturnType<typeof serveOpsInBackground> | undefined;
  if (serving) {
    http = serve(run);
    await run.stop.stopped;
  }
  await shutdown(run, http);
  return run.stop.failed ? 1 : 0;
}

/** The flags, the options and plugin.yaml; undefined (said on stderr) when they will not do. */
async function startProxy(argv: string[]): Promise<Started | undefined> {
  try {
    return await startProcess(argv, 'proxy', options => {
      if (options.redis && !options.redis.signingKey) {
        throw new Error(
          'distributed mode (CMP_OFFLOAD_REDIS_URL) needs a signing key: set CMP_OFFLOAD_SIGNING_KEY or CMP_OFFLOAD_SIGNING_KEY_FILE',
        );
      }
    });
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    return undefined;
  }
}

/** Everything before listening: start-up checks and lines, the stop signals, the dispatcher, the front. */
async function prepareProxy({ log, engine }: Started): Promise<ProxyRun> {
  const { options } = engine;
  // Standalone: plugin commands run as this uid; keep them out of this process's memory (the cache).
  const dumpable = options.redis ? undefined : becomeNonDumpable();
  if (dumpable) log.warn({ reason: dumpable }, 'plugin commands can read this process\'s memory where the kernel lets a process trace another of its uid');
  let front: Front | undefined;
  const stop = stopOnSignal(log, () => front?.inflight() ?? 0);
  const pluginFile = socketFileName(engine.config);
  const socketPath = `${options.socketDir}/${pluginFile}`;
  await startUpLines(log, engine);
  const pluginName = pluginFile.replace(/\.sock$/, '');
  const specDigest = pluginSpecDigest(engine.config);
  const { dispatcher, recorderChecked } = await buildDispatcher(log, engine, pluginName, specDigest);
  let ingest: IngestProcesses | undefined;
  if (options.proxyProcesses > 1) {
    ingest = await startIngestProcesses(log, options, dispatcher, stop);
    front = ingestFront(ingest, socketPath);
  } else front = singleProcess({ engine, pluginName, specDigest, dispatcher, log }, socketPath);
  return { log, engine, options, stop, socketPath, pluginName, dispatcher, recorderChecked, front, ingest, listening: false };
}

function stopOnSignal(log: Started['log'], inflight: () => number): Stop {
  const stopSignal = untilStopSignal(log, '', () => ({ inflight: inflight() }));
  let stopNow: () => void = () => {};
  const stopped = Promise.race([stopSignal, new Promise<void>(resolve => (stopNow = resolve))]);
  return { stopped, stopNow: () => stopNow(), failed: false };
}

/** Argo's note on a plugin without discovery; the OTLP exporter, when configured. */
async function startUpLines(log: Started['log'], engine: Started['engine']): Promise<void> {
  const { options } = engine;
  if (!discoveryConfigured(engine.config)) {
    log.info('No discovery configuration is defined for plugin %s. To use this plugin, specify "spec.source.plugin.name" in the Application.', engine.config.metadata.name);
  }
  // Tracing (off unless an OTLP endpoint is set: then, and only then, the SDK is loaded).
  if (options.otlp) await (await import('../cmp/observe/otel-sdk.js')).startTracing(options.otlp, 'argocd-cmp-server', log);
}

/** The dispatcher: the local pool (standalone) or the Redis queue (distributed). */
async function buildDispatcher(log: Started['log'], engine: Started['engine'], pluginName: string, specDigest: string) {
  const { options } = engine;
  // The queue's modules (BullMQ, ioredis: ~0.2 s of CPU to load) only where they run: not in a
  // standalone proxy, nor in the ingest processes, which load this module too (runProxy).
  const dispatcher: Dispatcher = options.redis
    ? new (await import('./dispatch/queue-dispatcher.js')).QueueDispatcher({ engine, pluginName, specDigest, log })
    : new LocalDispatcher(engine, log);
  // Standalone: find out now whether cmp-reap works, not in the first request's path.
  if (!options.redis) void usableReaper();
  // Standalone: this process runs the traced commands. Whether the recorder works is found out
  // in the background and said once; 'serving' does not wait for it (it means the socket accepts),
  // and an early traced request waits for the same probe.
  const recorderChecked = options.redis ? undefined : checkRecorder(engine, log);
  if (options.redis && !(await (dispatcher as QueueDispatcher).waitReady(options.redis.timeoutMs))) {
    log.warn('Redis is not reachable yet; requests fail with UNAVAILABLE until it is');
  }
  return { dispatcher, recorderChecked };
}

/** CMP_OFFLOAD_PROXY_PROCESSES > 1: the ingest processes; one failing stops the proxy (exit code 1). */
async function startIngestProcesses(log: Started['log'], options: ProxyRun['options'], dispatcher: Dispatcher, stop: Stop): Promise<IngestProcesses> {
  const { IngestProcesses } = await import('./processes/coordinator.js');
  return new IngestProcesses({
    processes: options.proxyProcesses,
    dispatcher,
    indexMemoBytes: options.indexMemoBytes,
    spools: new SpoolStore(options.workRoot, { keepBytes: options.spoolKeepBytes }),
    graceMs: options.shutdownGraceMs,
    log,
    onFailure: () => {
      stop.failed = true;
      stop.stopNow();
    },
  });
}

/**
 * Reset the work root and listen: true once serving, false when a stop came first, undefined
 * when either failed (said on stderr).
 */
async function listen({ options, socketPath, dispatcher, stop, ingest, front }: ProxyRun): Promise<boolean | undefined> {
  // Argo listens first and then resets the work root; resetting first means no request can
  // ever land in a work dir that is about to be wiped.
  try {
    await resetWorkRoot(options.workRoot);
  } catch (err) {
    process.stderr.write(`error initializing plugin service: ${(err as Error).message}\n`);
    await dispatcher.close();
    return undefined;
  }
  // A socket that will not go makes listen fail next, and that error is reported.
  await fs.rm(socketPath, { force: true }).catch(() => {});
  // A stop asked while starting (Ctrl-C in the first second reaches the whole process group)
  // ends the start: no ingest process is replaced after it, and 'serving' is not said.
  void stop.stopped.then(() => ingest?.stopReplacing());
  const listened = front.listen();
  let serving: boolean;
  try {
    serving = await Promise.race([listened.then(() => true), stop.stopped.then(() => false)]);
  } catch (err) {
    process.stderr.write(`${await listenFailure(socketPath, err)}\n`);
    await dispatcher.close();
    return undefined;
  }
  if (!serving) await listened.catch(() => {}); // the drain below shuts down what it made
  return serving;
}

/** The socket accepts: the info metrics, the ops server, and the 'serving' line. */
function serve(run: ProxyRun): ReturnType<typeof serveOpsInBackground> {
  const { options, log, socketPath, pluginName, dispatcher, ingest } = run;
  metrics.info.set({ role: 'proxy', plugin: pluginName, mode: options.redis ? 'distributed' : 'standalone' }, 1);
  if (!options.redis) metrics.concurrencyLimit.set(options.concurrency);
  const http = serveOpsInBackground(options.http, log, async () =>
    (await import('./http-app.js')).buildProxyHttpApp({
      socketPath,
      listening: () => run.listening,
      ...(ingest ? { metrics: () => ingest.metrics() } : {}),
      ...(options.redis
        ? { redis: { connection: (dispatcher as QueueDispatcher).commandConnection, prefix: options.redis.prefix, queue: pluginName } }
        : { cache: (dispatcher as LocalDispatcher).cache }),
      ...(options.cache.traced ? { paths: dispatcher.paths, token: options.dashboardToken } : {}),
    }),
  );
  log.info(
    options.redis
      ? { socket: socketPath, mode: 'distributed', prefix: options.redis.prefix, processes: options.proxyProcesses, processesFrom: options.proxyProcessesFrom }
      : { socket: socketPath, mode: 'standalone', concurrency: options.concurrency, processes: options.proxyProcesses, processesFrom: options.proxyProcessesFrom },
    'serving',
  );
  return http;
}

/**
 * Stop accepting (the repo-server dials the socket path afresh for every use), let in-flight
 * requests finish within the grace period, then force the rest and kill what they left.
 */
async function shutdown(run: ProxyRun, http: ReturnType<typeof serveOpsInBackground> | undefined): Promise<void> {
  const { log, options } = run;
  run.listening = false;
  await fs.rm(run.socketPath, { force: true }).catch(logFailed(log, 'stopping: removing the socket'));
  await run.front.drain();
  await run.recorderChecked; // its probe command is ours to wait for (bounded by the probe's 10 s)
  await run.dispatcher.close();
  await shutdownTracing().catch(logFailed(log, 'stopping: flushing the last spans'));
  await (await http)?.close().catch(logFailed(log, 'stopping: closing the ops server'));
  await fs.rm(options.workRoot, { recursive: true, force: true }).catch(logFailed(log, 'stopping: removing the work root'));
  log.info('stopped');
  log.flush();
}

/**
 * The ingest processes serving the socket. No bind of our own before them: a client would be
 * accepted by it and then find no socket. Only when theirs failed (the cluster module words the
 * error its own way), one bind here for the text a single process gives.
 */
function ingestFront(ingest: IngestProcesses, socketPath: string): Front {
  return {
    listen: () =>
      ingest.start().catch(async (err: unknown) => {
        const probe = await bindUnix(new grpc.Server(), socketPath);
        probe.forceShutdown();
        throw err;
      }),
    inflight: () => ingest.inflight,
    async drain() {
      await ingest.stop();
      await terminateAll(5_000);
      await ingest.settled();
    },
  };
}

/** One process serving the socket itself: the gRPC server, with its tree-index memo and spool store. */
function singleProcess(deps: Omit<StreamingRpcDeps, 'inflight' | 'memo' | 'spools'>, socketPath: string): Front {
  const inflight = new Set<Promise<unknown>>();
  const { options } = deps.engine;
  const memo = new IndexMemo(options.indexMemoBytes);
  const spools = new SpoolStore(options.workRoot, { keepBytes: options.spoolKeepBytes });
  const server = buildGrpcServer({ ...deps, inflight, memo, spools });
  return {
    listen: () => bindUnix(server, socketPath).then(() => {}),
    inflight: () => inflight.size,
    async drain() {
      await drainGrpcServer(server, inflight, options.shutdownGraceMs, deps.log!);
      await terminateAll(5_000);
      await Promise.allSettled([...inflight]);
    },
  };
}

function bindUnix(server: grpc.Server, socketPath: string): Promise<grpc.Server> {
  return new Promise((resolve, reject) =>
    server.bindAsync(`unix://${socketPath}`, grpc.ServerCredentials.createInsecure(), err => (err ? reject(err) : resolve(server))),
  );
}
