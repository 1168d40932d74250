import fs from 'node:fs/promises';
import net from 'node:net';
import { settled } from '../cmp/exec/process-groups.js';
import { RunnerConnection, type ConnectionDeps } from './connection.js';

/**
 * Isolated mode: one request at a time, and `sweep` after each run (it throws when the runner
 * cannot make itself clean again: `onSweepFailed` then stops the runner).
 */
export interface RunnerIsolation {
  sweep(): Promise<void>;
  onSweepFailed(err: Error): void;
}

export interface RunnerServer {
  /** Stop accepting; let running requests finish within `graceMs`, then stop them. */
  close(graceMs: number): Promise<void>;
}

/**
 * Listen on `socketPath` (a stale socket file from a previous run is replaced) with mode 0600:
 * only this uid (the worker's, in the pod) may connect. Each connection is one request.
 */
export async function serveRunner(socketPath: string, deps: ConnectionDeps, isolation?: RunnerIsolation): Promise<RunnerServer> {
  const live = new Set<RunnerConnection>();
  const turns = isolation ? new OneRunAtATime(isolation) : undefined;
  const connDeps = turns ? turns.connectionDeps(deps) : deps;
  const accept = (socket: net.Socket) => {
    if (socket.destroyed) return;
    const conn = new RunnerConnection(socket, connDeps);
    live.add(conn);
    void conn.finished.then(() => live.delete(conn));
  };
  const server = net.createServer(socket => {
    const sweeping = turns?.sweeping;
    if (!sweeping) return accept(socket);
    socket.pause();
    void sweeping.then(() => {
      accept(socket);
      // Explicitly paused: a 'data' listener alone would not start the flow again.
      socket.resume();
    });
  });
  await removeStaleSocket(socketPath);
  await listenPrivately(server, socketPath);
  server.on('error', err => deps.log.error({ err: err.message }, 'runner socket error'));

  return {
    async close(graceMs) {
      const closed = new Promise<void>(resolve => server.close(() => resolve()));
      const all = () => Promise.all([...live].map(c => c.finished));
      const grace = new Promise<'timeout'>(resolve => setTimeout(() => resolve('timeout'), graceMs).unref());
      if ((await Promise.race([all().then(() => 'done' as const), grace])) === 'timeout') {
        deps.log.warn({ running: live.size }, 'grace period over: stopping running requests (the worker retries them)');
        for (const c of live) c.stop();
        await all();
      }
      await closed;
    },
  };
}

/** Isolated mode's turns: one connection's run at a time, then the sweep before the next. */
class OneRunAtATime {
  private readonly isolation: RunnerIsolation;
  /** The connection whose request runs, from its HEADER to the end of its sweep. */
  private active: RunnerConnection | undefined;
  private sweepUnderWay: Promise<void> | undefined;
  private lastSweepMs: number | undefined;

  constructor(isolation: RunnerIsolation) {
    this.isolation = isolation;
  }

  /** A sweep under way: connections that come meanwhile wait for it rather than being refused. */
  get sweeping(): Promise<void> | undefined {
    return this.sweepUnderWay;
  }

  connectionDeps(deps: ConnectionDeps): ConnectionDeps {
    return { ...deps, claim: conn => this.claim(conn), afterRun: conn => this.afterRun(conn), lastSweepMs: () => this.lastSweepMs };
  }

  private claim(conn: RunnerConnection): boolean {
    if (this.active && this.active !== conn) return false;
    this.active = conn;
    // A connection that ends before its run (hang-up during the upload) ran nothing: no sweep.
    void conn.finished.then(() => {
      if (this.active === conn && !this.sweepUnderWay) this.active = undefined;
    });
    return true;
  }

  private async afterRun(conn: RunnerConnection): Promise<void> {
    if (this.active !== conn) return;
    const { isolation } = this;
    this.sweepUnderWay = (async () => {
      // The run's kill sequences first (SIGTERM, SIGKILL after ARGOCD_EXEC_FATAL_TIMEOUT):
      // its TERM handlers get the same grace as anywhere else, then the sweep.
      await settled();
      const started = performance.now();
      await isolation.sweep();
      this.lastSweepMs = performance.now() - started;
    })().catch((err: Error) => isolation.onSweepFailed(err));
    try {
      await this.sweepUnderWay;
    } finally {
      this.sweepUnderWay = undefined;
      this.active = undefined;
    }
  }
}

/** Listen with mode 0600 from the socket's creation: no window where others may connect. */
async function listenPrivately(server: net.Server, socketPath: string): Promise<void> {
  const umask = process.umask(0o177);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socketPath, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } finally {
    process.umask(umask);
  }
}

/** A socket file left by a runner that did not shut down cleanly; anything else is kept. */
async function removeStaleSocket(socketPath: string): Promise<void> {
  const st = await fs.lstat(socketPath).catch(() => undefined); // nothing there: nothing stale
  if (st?.isSocket()) await fs.unlink(socketPath);
}
