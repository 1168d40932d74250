import cluster, { type Worker } from 'node:cluster';
import fs from 'node:fs/promises';
import { AggregatorRegistry, type Registry } from 'prom-client';
import { logFailed, type Logger } from '../../cmp/log.js';
import { registry } from '../../cmp/observe/metrics.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { SpoolStore } from '../ingest/spool-store.js';
import type { ToCoordinator, ToIngest } from './ipc-messages.js';
import { HandOvers, type Peer } from './hand-over-dispatch.js';

/** An ingest process that dies this many times in a row before it listens is not started again. */
const START_FAILURES = 3;
/** How long a scrape waits for an ingest process's metrics (one that does not answer is left out). */
const METRICS_WAIT_MS = 2_000;

export interface IngestProcessesOptions {
  processes: number;
  dispatcher: Dispatcher;
  indexMemoBytes: number;
  /** The coordinator's copies of tarballs that came in memory, for the runs that need a file. */
  spools: SpoolStore;
  /** The grace period the ingest processes drain within (CMP_OFFLOAD_SHUTDOWN_GRACE). */
  graceMs: number;
  log: Logger;
  /** Called when ingest processes cannot be kept running (they fail at start): the proxy stops. */
  onFailure(): void;
}

/**
 * The coordinator's side of CMP_OFFLOAD_PROXY_PROCESSES > 1 (docs/architecture.md#proxy-processes): this
 * process owns the dispatcher (cache, coalescing, concurrency limit, execution or queue) and the
 * ops HTTP; N cluster workers (ingest processes, ingest-process.ts) serve the one plugin socket,
 * whose listening handle the cluster module keeps here and whose connections it deals round-robin.
 * An ingest process that dies is replaced; the socket stays open while any is left.
 */
export class IngestProcesses {
  private readonly handOvers: HandOvers;
  private readonly peers = new Map<number, Peer>();
  private readonly listening = new Set<number>();
  private stopping = false;
  private startFailures = 0;
  private starting: { resolve(): void; reject(err: Error): void } | undefined;
  private metricsSeq = 0;
  private readonly metricsWaits = new Map<number, (metrics: unknown[]) => void>();
  /** The request dirs and spool files each ingest process holds now. */
  private readonly workPaths = new Map<number, Set<string>>();

  constructor(private readonly opts: IngestProcessesOptions) {
    this.handOvers = new HandOvers(opts.dispatcher, opts.indexMemoBytes, opts.spools);
  }

  /** Requests being answered now. */
  get inflight(): number {
    return this.handOvers.size;
  }

  /** Fork the ingest processes; resolves once every one of them listens on the socket. */
  start(): Promise<void> {
    cluster.setupPrimary({ serialization: 'advanced' });
    cluster.on('message', (worker: Worker, msg: ToCoordinator) => this.onMessage(worker, msg));
    cluster.on('exit', (worker: Worker, code: number | null, signal: string | null) => this.onExit(worker, code, signal));
    const ready = new Promise<void>((resolve, reject) => (this.starting = { resolve, reject }));
    for (let i = 0; i < this.opts.processes; i++) this.fork();
    return ready;
  }

  private fork(): void {
    const worker = cluster.fork();
    // The cluster module's own sends to a process that is dying (a connection handed to it, say)
    // fail as an 'error' event on its Worker, which, unheard, would end the coordinator.
    worker.on('error', err => this.opts.log.warn({ pid: worker.process.pid, err: String(err) }, 'ingest process channel error'));
    this.peers.set(worker.id, {
      id: worker.id,
      // A process gone meanwhile gets nothing: without the callback, a closed channel would be an 'error' event.
      send: msg => {
        if (worker.isConnected()) worker.send(msg, () => {});
      },
    });
  }

  private onMessage(worker: Worker, msg: ToCoordinator): void {
    const peer = this.peers.get(worker.id);
    if (!peer) return;
    if (msg.t === 'listening') {
      this.listening.add(worker.id);
      this.startFailures = 0;
      if (this.listening.size >= this.opts.processes) {
        this.starting?.resolve();
        this.starting = undefined;
      }
    } else if (msg.t === 'listen-failed') {
      this.failStart(new Error(msg.message));
    } else if (msg.t === 'work-path') {
      const held = this.workPaths.get(worker.id) ?? new Set<string>();
      this.workPaths.set(worker.id, held);
      if (msg.held) held.add(msg.path);
      else held.delete(msg.path);
    } else if (msg.t === 'metrics') {
      this.metricsWaits.get(msg.id)?.(msg.metrics);
    } else this.handOvers.onMessage(peer, msg);
  }

  private onExit(worker: Worker, code: number | null, signal: string | null): void {
    const peer = this.peers.get(worker.id);
    if (!peer) return;
    this.peers.delete(worker.id);
    const listened = this.listening.delete(worker.id);
    this.handOvers.peerGone(peer);
    // What it left in the work root (a run handed over has its own link to the tarball).
    for (const p of this.workPaths.get(worker.id) ?? []) {
      void fs.rm(p, { recursive: true, force: true }).catch(logFailed(this.opts.log, 'removing what an ingest process left', 'warn', { path: p }));
    }
    this.workPaths.delete(worker.id);
    if (this.stopping) return;
    this.opts.log.warn({ pid: worker.process.pid, code, signal }, 'ingest process exited; starting another');
    if (!listened && ++this.startFailures >= START_FAILURES) {
      const err = new Error(`ingest processes keep failing at start (${this.startFailures} in a row; exit code ${code}, signal ${signal})`);
      if (this.starting) return this.failStart(err);
      this.opts.log.error({ failures: this.startFailures }, 'ingest processes keep failing at start; stopping');
      this.opts.onFailure();
      return;
    }
    this.fork();
  }

  /** Starting failed: no replacements, the others end, and start() rejects. */
  private failStart(err: Error): void {
    if (!this.starting) return;
    const { reject } = this.starting;
    this.starting = undefined;
    void this.stop().then(() => reject(err));
  }

  /** The Prometheus text of this process and every ingest process, summed (one view). */
  async metrics(): Promise<string> {
    const id = ++this.metricsSeq;
    const parts: unknown[][] = [await registry.getMetricsAsJSON()];
    const peers = [...this.peers.values()].filter(p => this.listening.has(p.id));
    await new Promise<void>(resolve => {
      let left = peers.length;
      if (left === 0) return resolve();
      const timer = setTimeout(resolve, METRICS_WAIT_MS);
      this.metricsWaits.set(id, metrics => {
        parts.push(metrics);
        if (--left === 0) {
          clearTimeout(timer);
          resolve();
        }
      });
      for (const p of peers) p.send({ t: 'metrics', id });
    });
    this.metricsWaits.delete(id);
    return (AggregatorRegistry.aggregate(parts) as Registry).metrics();
  }

  /**
   * A stop was asked: an ingest process that exits from now on is not replaced (Ctrl-C reaches
   * the whole process group, and one still loading dies of it), and start() settles.
   */
  stopReplacing(): void {
    this.stopping = true;
    this.starting?.resolve();
    this.starting = undefined;
  }

  /**
   * Shutdown: every ingest process stops accepting and drains within the grace period (the
   * coordinator still answers their hand-overs meanwhile); one that has not exited a few seconds
   * after it is killed. One that does not listen yet holds no request: it is killed at once
   * (before its message handler is installed, it would not hear the stop).
   */
  async stop(): Promise<void> {
    this.stopping = true;
    const workers = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
    const exited = Promise.all(workers.map(w => new Promise<void>(resolve => (w.isDead() ? resolve() : w.once('exit', () => resolve())))));
    for (const w of workers) if (!this.listening.has(w.id) && !w.isDead()) w.process.kill('SIGKILL');
    for (const p of this.peers.values()) if (this.listening.has(p.id)) p.send({ t: 'stop' } satisfies ToIngest);
    const late = setTimeout(() => {
      for (const w of workers) if (!w.isDead()) w.process.kill('SIGKILL');
    }, this.opts.graceMs + 5_000);
    await exited;
    clearTimeout(late);
  }

  /** Resolves when every request handed over is answered (after stop, their runs are cancelled). */
  settled(): Promise<void> {
    return this.handOvers.settled();
  }
}
