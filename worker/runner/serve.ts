import fs from 'node:fs/promises';
import net from 'node:net';
import { RunnerConnection, type ConnectionDeps } from './connection.js';

export interface RunnerServer {
  /** Stop accepting; let running requests finish within `graceMs`, then stop them. */
  close(graceMs: number): Promise<void>;
}

/**
 * Listen on `socketPath` (a stale socket file from a previous run is replaced) with mode 0600:
 * only this uid (the worker's, in the pod) may connect. Each connection is one request.
 */
export async function serveRunner(socketPath: string, deps: ConnectionDeps): Promise<RunnerServer> {
  const live = new Set<RunnerConnection>();
  const server = net.createServer(socket => {
    const conn = new RunnerConnection(socket, deps);
    live.add(conn);
    void conn.finished.then(() => live.delete(conn));
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
  const st = await fs.lstat(socketPath).catch(() => undefined);
  if (st?.isSocket()) await fs.unlink(socketPath);
}
