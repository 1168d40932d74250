import fs from 'node:fs/promises';
import * as grpc from '@grpc/grpc-js';
import { discoveryConfigured, pluginSpecDigest, socketFileName } from '../cmp/config/plugin-config.js';
import { terminateAll } from '../cmp/exec/process-groups.js';
import { usableReaper } from '../cmp/exec/reaper.js';
import { resetWorkRoot, startProcess, untilStopSignal } from '../cmp/process-start.js';
import { metrics } from '../cmp/observe/metrics.js';
import { serveOpsInBackground } from '../cmp/observe/ops-in-background.js';
import { shutdownTracing } from '../cmp/observe/tracing.js';
import { checkRecorder } from '../cmp/trace/tracer-probe.js';
import type { Dispatcher } from './dispatch/dispatcher.js';
import { LocalDispatcher } from './dispatch/local-dispatcher.js';
import { QueueDispatcher } from './dispatch/queue-dispatcher.js';
import { buildGrpcServer } from './grpc-server.js';
import { IndexMemo } from './ingest/index-memo.js';
import { SpoolStore } from './ingest/spool-store.js';

/**
 * `cmp-offload proxy`: the composition root. Starts like argocd-cmp-server (cmp-contract §1.3):
 * read and validate plugin.yaml, remove a stale socket, listen, reset the work root, serve.
 * Returns the process exit code once the server has shut down.
 */
export async function runProxy(argv: string[]): Promise<number> {
  let started;
  try {
    started = await startProcess(argv, 'proxy', options => {
      if (options.redis && !options.redis.signingKey) {
        throw new Error(
          'distributed mode (CMP_OFFLOAD_REDIS_URL) needs a signing key: set CMP_OFFLOAD_SIGNING_KEY or CMP_OFFLOAD_SIGNING_KEY_FILE',
        );
      }
    });
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    return 1;
  }
  const { log, engine } = started;
  const { options } = engine;
  const inflight = new Set<Promise<unknown>>();
  const stopSignal = untilStopSignal(log, '', () => ({ inflight: inflight.size }));
  const pluginFile = socketFileName(engine.config);
  const socketPath = `${options.socketDir}/${pluginFile}`;
  if (!discoveryConfigured(engine.config)) {
    log.info('No discovery configuration is defined for plugin %s. To use this plugin, specify "spec.source.plugin.name" in the Application.', engine.config.metadata.name);
  }

  // Tracing (off unless ARGOCD_CMP_SERVER_OTLP_ADDRESS is set: then, and only then, the exporter is loaded).
  if (options.otlp) {
    (await import('../cmp/observe/otlp-exporter.js')).startOtlpTracing(options.otlp, 'argocd-cmp-server', log);
    log.info({ address: options.otlp.address, insecure: options.otlp.insecure }, 'tracing: exporting spans over OTLP/gRPC');
  }
  const pluginName = pluginFile.replace(/\.sock$/, '');
  const specDigest = pluginSpecDigest(engine.config);
  const dispatcher: Dispatcher = options.redis
    ? new QueueDispatcher({ engine, pluginName, specDigest, log })
    : new LocalDispatcher(engine);
  // Standalone: find out now whether cmp-reap works, not in the first request's path.
  if (!options.redis) void usableReaper();
  // Standalone: this process runs the traced commands. Whether the recorder works is found out
  // in the background and said once; 'serving' does not wait for it (it means the socket accepts),
  // and an early traced request waits for the same probe.
  const recorderChecked = options.redis ? undefined : checkRecorder(engine, log);
  if (dispatcher instanceof QueueDispatcher && !(await dispatcher.waitReady(options.redis!.timeoutMs))) {
    log.warn('Redis is not reachable yet; requests fail with UNAVAILABLE until it is');
  }
  const memo = new IndexMemo(options.indexMemoBytes);
  const spools = new SpoolStore(options.workRoot);
  const server = buildGrpcServer({ engine, pluginName, specDigest, dispatcher, inflight, log, memo, spools });

  // Argo listens first and then resets the work root; resetting first means no request can
  // ever land in a work dir that is about to be wiped.
  try {
    await resetWorkRoot(options.workRoot);
  } catch (err) {
    process.stderr.write(`error initializing plugin service: ${(err as Error).message}\n`);
    await dispatcher.close();
    return 1;
  }
  await fs.rm(socketPath, { force: true }).catch(() => {});
  try {
    await new Promise<void>((resolve, reject) =>
      server.bindAsync(`unix://${socketPath}`, grpc.ServerCredentials.createInsecure(), err => (err ? reject(err) : resolve())),
    );
  } catch (err) {
    process.stderr.write(`failed to listen on ${socketPath}: ${(err as Error).message}\n`);
    await dispatcher.close();
    return 1;
  }
  let listening = true;
  metrics.info.set({ role: 'proxy', plugin: pluginName, mode: options.redis ? 'distributed' : 'standalone' }, 1);
  if (!options.redis) metrics.concurrencyLimit.set(options.concurrency);
  const http = serveOpsInBackground(options.http, log, async () =>
    (await import('./http-app.js')).buildProxyHttpApp({
      socketPath,
      listening: () => listening,
      ...(dispatcher instanceof QueueDispatcher
        ? { redis: { connection: dispatcher.commandConnection, prefix: options.redis!.prefix, queue: pluginName } }
        : { cache: (dispatcher as LocalDispatcher).cache }),
      ...(options.cache.traced ? { paths: dispatcher.paths, token: options.dashboardToken } : {}),
    }),
  );
  log.info(
    options.redis
      ? { socket: socketPath, mode: 'distributed', prefix: options.redis.prefix }
      : { socket: socketPath, mode: 'standalone', concurrency: options.concurrency },
    'serving',
  );

  await stopSignal;

  // Stop accepting (the repo-server dials the socket path afresh for every use), let in-flight
  // requests finish within the grace period, then force the rest and kill what they left.
  listening = false;
  await fs.rm(socketPath, { force: true }).catch(() => {});
  const graceful = new Promise<void>(resolve => server.tryShutdown(() => resolve()));
  const grace = new Promise<'timeout'>(resolve => setTimeout(() => resolve('timeout'), options.shutdownGraceMs).unref());
  if ((await Promise.race([graceful.then(() => 'done' as const), grace])) === 'timeout') {
    log.warn({ inflight: inflight.size }, 'grace period over, cancelling in-flight requests');
    server.forceShutdown();
  }
  await terminateAll(5_000);
  await Promise.allSettled([...inflight]);
  await recorderChecked; // its probe command is ours to wait for (bounded by the probe's 10 s)
  await dispatcher.close();
  await shutdownTracing().catch(() => {});
  await (await http)?.close().catch(() => {});
  await fs.rm(options.workRoot, { recursive: true, force: true }).catch(() => {});
  log.info('stopped');
  log.flush();
  return 0;
}
