import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { startDistributed } from '../helpers/distributed.js';
import { startProxy } from '../helpers/proxy-process.js';

export type Mode = 'standalone' | 'distributed';

function haveRedis(): boolean {
  try {
    execFileSync('redis-server', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/**
 * The modes every end-to-end suite runs in: the same tests, the same expected bytes.
 * CMP_OFFLOAD_E2E_MODES narrows it (e.g. `standalone` on a machine without redis-server).
 */
export const MODES: Mode[] = (process.env.CMP_OFFLOAD_E2E_MODES ?? 'standalone,distributed')
  .split(',')
  .filter((m): m is Mode => m === 'standalone' || (m === 'distributed' && haveRedis()));

export interface CmpServer {
  mode: Mode;
  socketPath: string;
  /** Every `_cmp_server` work root in play (proxy, and workers in distributed mode). */
  workRoots: string[];
  /** Distributed mode: the Redis every process shares. */
  redisUrl?: string;
  /** The proxy's pid (to starve it with SIGSTOP). */
  proxyPid: number;
  /** The service processes besides the proxy's: distributed mode's workers and their runners. */
  backendPids: number[];
  /** What every process (proxy, workers, their runners) wrote to stderr so far. */
  stderr(): string;
  /** Stop everything; resolves with the proxy's exit code. */
  stop(): Promise<number | null>;
}

export interface ServerOptions {
  pluginYaml: string;
  socketName: string;
  /** Env for every process (proxy and workers). */
  env?: Record<string, string>;
  /** Env for the proxy only, on top of `env` (e.g. its CMP_OFFLOAD_HTTP_ADDR). */
  proxyEnv?: Record<string, string>;
  files?: Record<string, string>;
  /** Distributed mode: worker processes (default 2). */
  workers?: number;
}

/** Start a CMP server in the given mode: a standalone proxy, or proxy + Redis + workers. */
export async function startCmp(mode: Mode, opts: ServerOptions): Promise<CmpServer> {
  if (mode === 'standalone') {
    const proxy = await startProxy({ ...opts, env: { ...opts.env, ...opts.proxyEnv } });
    return { mode, socketPath: proxy.socketPath, workRoots: [proxy.workRoot], proxyPid: proxy.proc.pid!, backendPids: [], stderr: proxy.stderr, stop: () => proxy.stop() };
  }
  const d = await startDistributed({ ...opts, workers: opts.workers ?? 2 });
  return {
    mode,
    socketPath: d.proxy.socketPath,
    workRoots: [d.proxy.workRoot, ...d.workers.map(w => path.join(w.base, 'work', '_cmp_server'))],
    redisUrl: d.env.CMP_OFFLOAD_REDIS_URL,
    proxyPid: d.proxy.proc.pid!,
    backendPids: d.workers.flatMap(w => [w.proc.pid!, ...(w.runner ? [w.runner.proc.pid!] : [])]),
    stderr: () => [d.proxy.stderr(), ...d.workers.flatMap(w => [w.stderr(), w.runner?.stderr() ?? ''])].join('\n'),
    async stop() {
      const code = await d.proxy.stop();
      await d.stop();
      return code;
    },
  };
}

/**
 * Env for suites that count which apps ran after a storm of requests at once: a standalone proxy
 * stores no answer of a run that overlapped another (docs/architecture.md#standalone), so there they run one at a
 * time, which keeps every run cacheable.
 */
export function oneRunAtATime(mode: Mode): Record<string, string> {
  return mode === 'standalone' ? { CMP_OFFLOAD_CONCURRENCY: '1' } : {};
}

/** Entries left in the work roots (should be none between requests). */
export function leftovers(server: CmpServer): string[] {
  return server.workRoots.flatMap(root => (fs.existsSync(root) ? fs.readdirSync(root).map(n => path.join(root, n)) : []));
}

/** Wait until `check` holds (polling), or fail after `timeoutMs`. */
export async function eventually(check: () => boolean, timeoutMs = 10_000, what = 'condition'): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise(r => setTimeout(r, 25));
  }
}
