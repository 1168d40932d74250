import * as grpc from '@grpc/grpc-js';
import { socketFileName, pluginSpecDigest } from '../../cmp/config/plugin-config.js';
import { becomeNonDumpable } from '../../cmp/exec/no-dump.js';
import { logFailed } from '../../cmp/log.js';
import { startProcess } from '../../cmp/process-start.js';
import { registry } from '../../cmp/observe/metrics.js';
import { shutdownTracing } from '../../cmp/observe/tracing.js';
import { buildGrpcServer, drainGrpcServer } from '../grpc-server.js';
import { IndexMemo } from '../ingest/index-memo.js';
import { SpoolStore, type WorkPaths } from '../ingest/spool-store.js';
import type { ToCoordinator, ToIngest } from './ipc-messages.js';
import { RemoteDispatcher, type Channel } from './remote-dispatcher.js';

/**
 * One ingest process (a cluster worker of the coordinator, coordinator.ts): serves the plugin
 * socket the coordinator holds, receives, hashes, indexes and spools each repo stream, answers
 * MatchRepository from the tree index where it can, computes the cache key, and hands the rest to
 * the coordinator (remote-dispatcher.ts). It tells the coordinator of the request dirs and spool
 * files it makes, so that they are removed if it dies. It runs no plugin command and serves no HTTP. Signals
 * are the coordinator's to act on: this process stops when the coordinator says so, and ends at
 * once when the coordinator is gone (the cluster module's rule).
 */
export async function runIngestProcess(argv: string[]): Promise<number> {
  const { log, engine } = await startProcess(argv, 'proxy', () => {}, true);
  const { options } = engine;
  // As the coordinator (which says so when it fails): out of reach of same-uid plugin commands.
  if (!options.redis) becomeNonDumpable();
  // Ctrl-C reaches the whole process group: the coordinator orders the shutdown.
  process.on('SIGINT', () => {});
  process.on('SIGTERM', () => {});
  if (options.otlp) await (await import('../../cmp/observe/otel-sdk.js')).startTracing(options.otlp, 'argocd-cmp-server', log, true);

  const listeners: ((msg: ToIngest) => void)[] = [];
  const channel: Channel = {
    send: (msg: ToCoordinator) => {
      if (process.connected) process.send!(msg, undefined, {}, () => {});
    },
    on: listener => listeners.push(listener),
  };
  const stopped = new Promise<void>(resolve => {
    process.on('message', (msg: ToIngest) => {
      if (msg.t === 'stop') return resolve();
      if (msg.t === 'metrics') {
        void registry.getMetricsAsJSON().then(metrics => channel.send({ t: 'metrics', id: msg.id, metrics }));
        return;
      }
      for (const l of listeners) l(msg);
    });
  });

  const pluginFile = socketFileName(engine.config);
  const socketPath = `${options.socketDir}/${pluginFile}`;
  const dispatcher = new RemoteDispatcher(channel);
  const inflight = new Set<Promise<unknown>>();
  const workPaths: WorkPaths = {
    held: p => channel.send({ t: 'work-path', path: p, held: true }),
    released: p => channel.send({ t: 'work-path', path: p, held: false }),
  };
  const server = buildGrpcServer({
    engine,
    pluginName: pluginFile.replace(/\.sock$/, ''),
    specDigest: pluginSpecDigest(engine.config),
    dispatcher,
    inflight,
    log,
    memo: new IndexMemo(options.indexMemoBytes),
    spools: new SpoolStore(options.workRoot, { keepBytes: options.spoolKeepBytes, workPaths }),
    workPaths,
  });
  // The cluster module makes this a listen of the coordinator's handle, shared by every ingest process.
  try {
    await new Promise<void>((resolve, reject) =>
      server.bindAsync(`unix://${socketPath}`, grpc.ServerCredentials.createInsecure(), err => (err ? reject(err) : resolve())),
    );
  } catch (err) {
    channel.send({ t: 'listen-failed', message: (err as Error).message });
    process.disconnect();
    return 1;
  }
  channel.send({ t: 'listening' });

  await stopped;
  await drainGrpcServer(server, inflight, options.shutdownGraceMs, log);
  await Promise.allSettled([...inflight]);
  await dispatcher.close();
  await shutdownTracing().catch(logFailed(log, 'stopping: flushing the last spans'));
  log.flush();
  process.disconnect();
  return 0;
}
