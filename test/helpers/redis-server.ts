import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { stopChild } from './stop-child.js';

export interface RedisServer {
  port: number;
  url: string;
  /** Stop the server (SIGTERM, SIGKILL after 5 s); its temp dir is removed. */
  stop(): Promise<void>;
  /** Stop it but keep the port, so that `restart()` brings it back at the same URL. */
  pause(): Promise<void>;
  restart(): Promise<void>;
  /**
   * Send a signal to the running server: SIGSTOP makes it hang (connections stay open, nothing
   * is answered), as an overloaded or partitioned Redis does; SIGCONT resumes it.
   */
  signal(sig: NodeJS.Signals): void;
}

/**
 * A free TCP port on 127.0.0.1 for a server a test starts next. Taken below the kernel's range
 * for the local ports of outgoing connections: a port the OS picked from that range (listen on
 * 0) was once taken by some connection before the server bound it (EADDRINUSE, a clean-clone CI
 * run of 2026-12-03). Random, and checked free, so concurrent test files rarely meet.
 */
export async function freePort(): Promise<number> {
  const low = ephemeralLow();
  for (let i = 0; i < 50 && low > 11_000; i++) {
    const port = 10_000 + Math.floor(Math.random() * (low - 10_000));
    if (await portFree(port)) return port;
  }
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

/** The first port of the kernel's ephemeral range (net.ipv4.ip_local_port_range). */
function ephemeralLow(): number {
  try {
    const low = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (low > 0) return low;
  } catch {
    // not Linux: the IANA range
  }
  return 49152;
}

/** Whether 127.0.0.1:`port` can be listened on now. */
export function portFree(port: number): Promise<boolean> {
  return new Promise(resolve => {
    const srv = net.createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/**
 * Start a throwaway `redis-server` on a free port, without persistence, in its own temp dir,
 * and wait until it accepts connections. Never touches a Redis the machine already runs.
 */
export async function startRedis(extraArgs: string[] = []): Promise<RedisServer> {
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-redis-'));
  let proc: ChildProcess | undefined;

  const launch = async () => {
    const child = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir,
        '--maxmemory-policy', 'noeviction', ...extraArgs],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    proc = child;
    let out = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`redis-server did not start: ${out}`)), 30_000);
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('Ready to accept connections')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', code => {
        clearTimeout(timer);
        reject(new Error(`redis-server exited with ${code}: ${out}`));
      });
    });
    child.stdout!.resume();
  };

  const halt = async () => {
    const child = proc;
    proc = undefined;
    if (child) await stopChild(child);
  };

  await launch();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    pause: halt,
    restart: launch,
    signal(sig) {
      if (!proc) throw new Error('redis-server is not running');
      proc.kill(sig);
    },
    async stop() {
      await halt();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
