import { Cluster, Redis, type ClusterOptions, type RedisOptions as IORedisOptions } from 'ioredis';
import type { RedisOptions } from '../config/options.js';
import { CmpError, messageOf, ourError } from '../errors.js';

/**
 * A connection of ours: one Redis (standalone or the master of a Sentinel group, which ioredis
 * finds through the sentinels and follows across failovers) or a Redis Cluster. Both have the
 * same commands, `status` ('ready' when usable) and events, and BullMQ takes either; every key
 * we use carries the prefix's hash tag, so each command and script stays in one slot.
 */
export type RedisClient = Redis | Cluster;

/**
 * What a connection is for:
 * - `command`: the proxy's, the workers' own and the CLI's requests. Every command is bounded by
 *   CMP_OFFLOAD_REDIS_TIMEOUT from the moment it is issued, connected or not: one sent while Redis
 *   is away waits in the offline queue for the reconnect (a restart, a Sentinel failover, a
 *   Cluster node coming back) and fails only when that takes longer, instead of at once. A
 *   command in flight when the connection drops is sent again after the reconnect, as on BullMQ's
 *   own connections. Of ours, one is not idempotent, and it heals: a blob APPEND doubled that
 *   way fails its checksum at the worker, which deletes it and has the proxy upload it again
 *   (waiters join and leave by id: sent twice, they count once).
 * - `blocking`: BullMQ workers and QueueEvents (long blocking reads; BullMQ requires
 *   `maxRetriesPerRequest: null` there) and pub/sub subscribers.
 * Every kind reconnects forever with a capped backoff: the service resumes by itself.
 */
export type ConnectionRole = 'command' | 'blocking';

const retryStrategy = (times: number) => Math.min(50 * 2 ** Math.min(times, 6), 2_000);
/**
 * Behind Sentinel a reconnect first asks a sentinel, which names the new master as soon as a
 * failover ends: capped at 500 ms, the connections follow it within half a second.
 * Why 500 ms: docs/decisions/0002-sentinel-reconnect-backoff.md
 */
const followMasterStrategy = (times: number) => Math.min(retryStrategy(times), 500);

/** The per-connection options of a role (for a Cluster: those of each node connection). */
function roleOptions(opts: RedisOptions, role: ConnectionRole): IORedisOptions {
  const common: IORedisOptions = {
    connectionName: 'cmp-offload',
    connectTimeout: Math.max(opts.timeoutMs, 1_000),
  };
  if (role === 'command') {
    return { ...common, maxRetriesPerRequest: null, commandTimeout: opts.timeoutMs };
  }
  return { ...common, maxRetriesPerRequest: null };
}

/**
 * ioredis options for a role and a standalone or Sentinel target; `rediss://` URLs get TLS and
 * URL credentials get AUTH from ioredis itself.
 */
export function connectionOptions(opts: RedisOptions, role: ConnectionRole): IORedisOptions {
  const common: IORedisOptions = {
    ...roleOptions(opts, role),
    retryStrategy,
    lazyConnect: false,
  };
  const t = opts.target;
  if (t.kind !== 'sentinel') return common;
  return {
    ...common,
    retryStrategy: followMasterStrategy,
    sentinels: t.sentinels.map(({ host, port }) => ({ host, port })),
    name: t.masterName,
    db: t.db,
    ...(t.username !== undefined ? { username: t.username } : {}),
    ...(t.password !== undefined ? { password: t.password } : {}),
    ...(t.sentinelUsername !== undefined ? { sentinelUsername: t.sentinelUsername } : {}),
    ...(t.sentinelPassword !== undefined ? { sentinelPassword: t.sentinelPassword } : {}),
    ...(t.tls ? { tls: {}, enableTLSForSentinelMode: true, sentinelTLS: {} } : {}),
    // Asking the sentinels again, for ever: a failover or a restart of every sentinel is waited out.
    sentinelRetryStrategy: retryStrategy,
    sentinelCommandTimeout: Math.max(opts.timeoutMs, 1_000),
    // React to +switch-master at once instead of at the next failed command.
    failoverDetector: true,
    // A demoted master answers writes with READONLY until it drops us: reconnect, which asks the
    // sentinels for the new master (the command itself fails, or is retried on blocking connections).
    reconnectOnError: err => (err.message.startsWith('READONLY') ? (role === 'blocking' ? 2 : 1) : false),
  };
}

/** ioredis Cluster options for a role: the role's node options, with the URL's credentials and TLS. */
export function clusterOptions(opts: RedisOptions, role: ConnectionRole): ClusterOptions {
  const t = opts.target;
  if (t.kind !== 'cluster') throw new Error('not a cluster target');
  return {
    clusterRetryStrategy: retryStrategy,
    enableOfflineQueue: true,
    // A slot whose master is down answers CLUSTERDOWN, retried every 100 ms: for as long as the
    // command timeout, so that a node restart or failover within it is waited out.
    retryDelayOnClusterDown: 100,
    maxRedirections: 16 + Math.ceil(opts.timeoutMs / 100),
    enableReadyCheck: true,
    lazyConnect: false,
    slotsRefreshTimeout: Math.max(opts.timeoutMs, 1_000),
    // With TLS, connect to the node names as given (no resolving to IPs first): the certificates
    // of managed clusters (ElastiCache, Memorystore) name hosts, not addresses.
    ...(t.tls ? { dnsLookup: (address: string, callback: (err: Error | null, address: string) => void) => callback(null, address) } : {}),
    redisOptions: {
      ...roleOptions(opts, role),
      ...(t.username !== undefined ? { username: t.username } : {}),
      ...(t.password !== undefined ? { password: t.password } : {}),
      ...(t.tls ? { tls: {} } : {}),
    },
  };
}

/** Open a connection for a role; errors are reported through `onError` instead of crashing. */
export function connectRedis(opts: RedisOptions, role: ConnectionRole, onError: (err: Error) => void = () => {}): RedisClient {
  const t = opts.target;
  let client: RedisClient;
  if (t.kind === 'cluster') client = new Cluster(t.nodes.map(({ host, port }) => ({ host, port })), clusterOptions(opts, role));
  else if (t.kind === 'sentinel') client = holdSwitchWhileConnecting(new Redis(connectionOptions(opts, role)));
  else client = new Redis(t.url, connectionOptions(opts, role));
  client.on('error', onError);
  return client;
}

/**
 * ioredis's failover detector (+switch-master from the sentinels) ends the connector when a switch
 * is announced. If the connection is just then reconnecting, asking a sentinel for the master, that
 * attempt fails with "Connection is closed.": ioredis rejects every queued command with it and gives
 * the connection up for good (status `end`), so a worker never takes a job again and a proxy fails
 * its calls until restarted. After a master's death every connection of every process reconnects
 * on the same backoff, so a switch announced during an attempt is common (the fault matrix's
 * sentinel/lossy-failover lost all three workers that way). Here the detector's call is held while
 * the connection is connecting and made once it is ready: it reconnects then, in case the attempt
 * under way found the old master (unless that attempt failed and a new one asked the sentinels
 * again). BullMQ's copies of a connection (duplicate()) get the same.
 */
function holdSwitchWhileConnecting(client: Redis): Redis {
  const connector = (client as unknown as { connector?: { disconnect?(): void } }).connector;
  // ioredis internals: should they change, leave the client as it is (redis-sentinel-switch.test.ts tells).
  if (typeof connector?.disconnect !== 'function') return client;
  const endConnector = connector.disconnect.bind(connector);
  let ours = false;
  let held = false;
  // Called by client.disconnect() (ours, BullMQ's) and by the failover detector: only the latter is held.
  connector.disconnect = () => {
    if (ours || client.status !== 'connecting') return endConnector();
    held = true;
  };
  const disconnect = client.disconnect.bind(client);
  client.disconnect = (reconnect?: boolean) => {
    ours = true;
    try {
      disconnect(reconnect);
    } finally {
      ours = false;
    }
  };
  client.on('reconnecting', () => (held = false));
  client.on('ready', () => {
    if (!held) return;
    held = false;
    client.disconnect(true);
  });
  const duplicate = client.duplicate.bind(client);
  client.duplicate = ((...args: Parameters<Redis['duplicate']>) => holdSwitchWhileConnecting(duplicate(...args))) as Redis['duplicate'];
  return client;
}

/** Resolve once `client` is ready (now or later). */
export function untilReady(client: RedisClient): Promise<void> {
  return new Promise(resolve => (client.status === 'ready' ? resolve() : client.once('ready', () => resolve())));
}

/** The error a caller sees when Redis cannot serve a request: UNAVAILABLE, naming Redis. */
export function redisUnavailable(opts: RedisOptions, cause: unknown): CmpError {
  if (cause instanceof CmpError) return cause;
  return ourError('redisUnreachable', opts.redacted, messageOf(cause));
}

/** Fail with `onTimeout()` if `promise` has not settled within `ms`. */
export function withTimeout<T>(promise: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
