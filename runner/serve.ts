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
  /** The connection whose request runs (isolated mode), from its HEADER to the end of its sweep. */
  let active: RunnerConnection | undefined;
  /** A sweep under way: connections that come meanwhile wait for it rather than being refused. */
  let sweeping: Promise<void> | undefined;
  let lastSweepMs: number | undefined;
  const connDeps: ConnectionDeps = isolation
    ? {
        ...deps,
        claim(conn) {
          if (active && active !== conn) return false;
          active = conn;
          // A connection that ends before its run (hang-up during the upload) ran nothing: no sweep.
          void conn.finished.then(() => {
            if (active === conn && !sweeping) active = undefined;
          });
          return true;
        },
        async afterRun(conn) {
          if (active !== conn) return;
          sweeping = (async () => {
            // The run's kill sequences first (SIGTERM, SIGKILL after ARGOCD_EXEC_FATAL_TIMEOUT):
            // its TERM handlers get the same grace as anywhere else, then the sweep.
            await settled();
            const started = performance.now();
            await isolation.sweep();
            lastSweepMs = performance.now() - started;
          })().catch((err: Error) => isolation.onSweepFailed(err));
          try {
            await sweeping;
          } finally {
            sweeping = undefined;
            active = undefined;
          }
        },
        lastSweepMs: () => lastSweepMs,
      }
    : deps;
  const accept = (socket: net.Socket) => {
    if (socket.destroyed) return;
    const conn = new RunnerConnection(socket, connDeps);
    live.add(conn);
    void conn.finished.then(() => live.delete(conn));
  };
  const server = net.createServer(socket => {
    if (!sweeping) return accept(socket);
    socket.pause();
    void sweeping.then(() => {
      accept(socket);
      // Explicitly paused: a 'data' listener alone would not start the flow again.
      socket.resume();
    });
  });
  await removeStaleSocket(socketPath);
  // The umask makes the socket 0600 from its creation: no window where others may connect.
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

/** A socket file left by a runner that did not shut down cleanly; anything else is kept. */
async function removeStaleSocket(socketPath: string): Promise<void> {
  const st = await fs.lstat(socketPath).catch(() => undefined); // nothing there: nothing stale
  if (st?.isSocket()) await fs.unlink(socketPath);
}
