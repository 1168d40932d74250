import { startProxy, type ProxyProcess } from './proxy-process.js';
import { startRedis, type RedisServer } from './redis-server.js';
import { startWorker, type WorkerProcess } from './worker-process.js';

export const TEST_SIGNING_KEY = 'test-signing-key-0123456789abcdef';

export interface DistributedOptions {
  /** plugin.yaml text, for the proxy and the workers (unless `workerPluginYaml`). */
  pluginYaml: string;
  /** Socket file name the plugin.yaml implies (e.g. `my-plugin.sock`). */
  socketName: string;
  /** Worker processes to start (default 2). */
  workers?: number;
  /** Env for every process (proxy and workers), on top of the Redis URL and signing key. */
  env?: Record<string, string>;
  proxyEnv?: Record<string, string>;
  workerEnv?: Record<string, string>;
  /** A different plugin.yaml for the workers (version skew tests). */
  workerPluginYaml?: string;
  /** A different plugin.yaml for the workers' runners (runner skew tests). */
  runnerPluginYaml?: string;
  /** Runner containers per worker (default: its CMP_OFFLOAD_CONCURRENCY, see worker-process.ts). */
  runners?: number;
  /** Where the workers run plugin commands: their runner (default) or `in-process`. */
  workerRunner?: 'process' | 'in-process';
  /** Start Redis with this password (requirepass); the URL every process gets carries it. */
  redisPassword?: string;
  /** Extra files for the config dirs. */
  files?: Record<string, string>;
  /**
   * Use this Redis (a Sentinel or Cluster URL of a topology the test owns and stops) instead of
   * starting one; `redis` is then a stand-in whose `stop()` does nothing.
   */
  redisUrl?: string;
}

export interface Distributed {
  redis: RedisServer;
  proxy: ProxyProcess;
  workers: WorkerProcess[];
  /** The env every process got (Redis URL, signing key, test timings, `env`). */
  env: Record<string, string>;
  /** Start one more worker with the same settings (plus `env`). */
  addWorker(env?: Record<string, string>): Promise<WorkerProcess>;
  /** Start one more proxy on its own socket, sharing Redis and workers. */
  addProxy(env?: Record<string, string>): Promise<ProxyProcess>;
  /** Stop proxies, workers and Redis (in that order). */
  stop(): Promise<void>;
}

/**
 * Distributed mode in one call: a throwaway redis-server, N `cmp-offload worker` processes (each
 * with its `cmp-offload runner`, see worker-process.ts) and a
 * `cmp-offload proxy` in distributed mode for the given plugin.yaml. Lock and stall intervals
 * are short so that crash recovery fits a test. Everything is torn down by `stop()`.
 */
export async function startDistributed(opts: DistributedOptions): Promise<Distributed> {
  const redis: RedisServer = opts.redisUrl ? externalRedis(opts.redisUrl) : await startRedis(opts.redisPassword ? ['--requirepass', opts.redisPassword] : []);
  const env: Record<string, string> = {
    CMP_OFFLOAD_REDIS_URL: opts.redisPassword ? redis.url.replace('redis://', `redis://:${opts.redisPassword}@`) : redis.url,
    CMP_OFFLOAD_SIGNING_KEY: TEST_SIGNING_KEY,
    CMP_OFFLOAD_LOCK_DURATION: '2s',
    CMP_OFFLOAD_STALLED_INTERVAL: '1s',
    ...opts.env,
  };
  const workers: WorkerProcess[] = [];
  const proxies: ProxyProcess[] = [];
  const addWorker = async (extra: Record<string, string> = {}) => {
    const w = await startWorker({
      pluginYaml: opts.workerPluginYaml ?? opts.pluginYaml,
      runnerPluginYaml: opts.runnerPluginYaml,
      ...(opts.workerRunner ? { runner: opts.workerRunner } : {}),
      ...(opts.runners ? { runners: opts.runners } : {}),
      env: { ...env, ...opts.workerEnv, ...extra },
      files: opts.files,
    });
    workers.push(w);
    return w;
  };
  const addProxy = async (extra: Record<string, string> = {}) => {
    const p = await startProxy({
      pluginYaml: opts.pluginYaml,
      socketName: opts.socketName,
      env: { ...env, ...opts.proxyEnv, ...extra },
      files: opts.files,
    });
    proxies.push(p);
    return p;
  };
  const stop = async () => {
    await Promise.allSettled(proxies.map(p => p.stop()));
    await Promise.allSettled(workers.map(w => w.stop()));
    await redis.stop();
  };
  try {
    await Promise.all(Array.from({ length: opts.workers ?? 2 }, () => addWorker()));
    const proxy = await addProxy();
    return { redis, proxy, workers, env, addWorker, addProxy, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** A Redis the test owns: nothing to stop, and no pause/restart/signal from here. */
function externalRedis(url: string): RedisServer {
  const notHere = () => {
    throw new Error('pause/restart/signal a topology through its own helper');
  };
  return { port: 0, url, stop: async () => {}, pause: async () => notHere(), restart: async () => notHere(), signal: notHere };
}
