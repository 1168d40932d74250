import { parseArgs } from 'node:util';
import { compileOptions, type RedisOptions } from '../cmp/config/options.js';
import { messageOf } from '../cmp/errors.js';
import { cacheStats, purgeCache } from '../cmp/queue/cache-admin.js';
import { KeySpace } from '../cmp/queue/keys.js';
import { connectRedis, untilReady, withTimeout, type RedisClient } from '../cmp/queue/redis-connection.js';

export const CACHE_USAGE = `usage: cmp-offload cache stats
       cmp-offload cache purge (--app NAME | --plugin NAME | --app NAME --plugin NAME | --all)
Uses CMP_OFFLOAD_REDIS_URL (one Redis, Sentinel or Cluster), CMP_OFFLOAD_REDIS_SENTINEL_* and
CMP_OFFLOAD_QUEUE_PREFIX like the proxy and the worker.
`;

export interface Io {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
}

/** `cmp-offload cache stats|purge`: inspect or empty the shared output cache in Redis. */
export async function runCacheCommand(argv: string[], io: Io): Promise<number> {
  const [action, ...rest] = argv;
  let values: { app?: string; plugin?: string; all?: boolean };
  try {
    ({ values } = parseArgs({
      args: rest,
      options: { app: { type: 'string' }, plugin: { type: 'string' }, all: { type: 'boolean' } },
      strict: true,
    }));
  } catch (err) {
    io.stderr.write(`${messageOf(err)}\n${CACHE_USAGE}`);
    return 2;
  }
  const filtered = values.app !== undefined || values.plugin !== undefined;
  if (action === 'stats' ? filtered || values.all : action !== 'purge' || filtered === Boolean(values.all)) {
    io.stderr.write(CACHE_USAGE);
    return 2;
  }
  return withRedis('cache', io, async (redis, ro) => {
    const keys = new KeySpace(ro.prefix);
    if (action === 'stats') {
      const s = await cacheStats(redis, keys);
      io.stdout.write(`cache entries: ${s.entries} (${s.bytes} bytes)\n`);
      for (const [plugin, n] of Object.entries(s.byPlugin).sort()) io.stdout.write(`  plugin ${decodeURIComponent(plugin)}: ${n}\n`);
      io.stdout.write(`tarball blobs: ${s.blobs} (${s.blobBytes} bytes)\n`);
    } else {
      const n = await purgeCache(redis, keys, values.all ? {} : { app: values.app, plugin: values.plugin });
      io.stdout.write(`purged ${n} cache entries\n`);
    }
    return 0;
  });
}

/**
 * Run `fn` on a command connection to the Redis of CMP_OFFLOAD_REDIS_URL (the settings of the
 * proxy and the worker), once it is ready; 1 and a message on stderr when it is not set or
 * not reachable, or `fn` fails.
 */
export async function withRedis(command: string, io: Io, fn: (redis: RedisClient, ro: RedisOptions) => Promise<number>): Promise<number> {
  const options = compileOptions(process.env);
  if (!options.redis) {
    io.stderr.write(`cmp-offload ${command}: CMP_OFFLOAD_REDIS_URL is not set (the standalone cache lives in the proxy)\n`);
    return 1;
  }
  const ro = options.redis;
  const redis = connectRedis(ro, 'command');
  try {
    await withTimeout(
      untilReady(redis),
      Math.max(ro.timeoutMs, 5_000),
      () => new Error(`Redis is unreachable at ${ro.redacted} (CMP_OFFLOAD_REDIS_URL)`),
    );
    return await fn(redis, ro);
  } catch (err) {
    io.stderr.write(`cmp-offload ${command}: ${messageOf(err)}\n`);
    return 1;
  } finally {
    redis.disconnect();
  }
}
