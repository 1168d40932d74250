import { Redis, type RedisOptions as IORedisOptions } from 'ioredis';
import type { RedisOptions } from '../config/options.js';
import { CmpError, messageOf, ourError } from '../errors.js';

/**
 * What a connection is for:
 * - `command`: the proxy's and the CLI's requests. No offline queue and short timeouts, so a
 *   call fails at once while Redis is away instead of hanging until the caller's deadline.
 * - `blocking`: BullMQ workers and QueueEvents (long blocking reads; BullMQ requires
 *   `maxRetriesPerRequest: null` there) and pub/sub subscribers.
 * Every kind reconnects forever with a capped backoff: the service resumes by itself.
 */
export type ConnectionRole = 'command' | 'blocking';

/** ioredis options for a role; `rediss://` URLs get TLS and URL credentials get AUTH from ioredis itself. */
export function connectionOptions(opts: RedisOptions, role: ConnectionRole): IORedisOptions {
  const common: IORedisOptions = {
    connectionName: 'cmp-offload',
    retryStrategy: times => Math.min(50 * 2 ** Math.min(times, 6), 2_000),
    connectTimeout: Math.max(opts.timeoutMs, 1_000),
    lazyConnect: false,
  };
  if (role === 'command') {
    return { ...common, enableOfflineQueue: false, maxRetriesPerRequest: 0, commandTimeout: opts.timeoutMs };
  }
  return { ...common, maxRetriesPerRequest: null };
}

/** Open a connection for a role; errors are reported through `onError` instead of crashing. */
export function connectRedis(opts: RedisOptions, role: ConnectionRole, onError: (err: Error) => void = () => {}): Redis {
  const client = new Redis(opts.url, connectionOptions(opts, role));
  client.on('error', onError);
  return client;
}

/** The Redis URL without credentials, for messages and logs. */
export function redactedUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname === '/' ? '' : u.pathname}`;
  } catch {
    return '<invalid URL>';
  }
}

/** The error a caller sees when Redis cannot serve a request: UNAVAILABLE, naming Redis. */
export function redisUnavailable(opts: RedisOptions, cause: unknown): CmpError {
  if (cause instanceof CmpError) return cause;
  return ourError('redisUnreachable', redactedUrl(opts.url), messageOf(cause));
}

/** Fail with `onTimeout()` if `promise` has not settled within `ms`. */
export function withTimeout<T>(promise: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
