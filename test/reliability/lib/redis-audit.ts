import { Redis } from 'ioredis';

/** A key without a TTL and why it may stay: who owns it and bounds its life. */
export interface KeyAudit {
  keys: number;
  withTtl: number;
  /** Keys without TTL, counted by owner kind. */
  owned: Record<string, number>;
  /** Keys without TTL and without an owner: each one is a leak. */
  orphans: string[];
}

/** BullMQ's per-queue structures: bounded by the queue's own settings (events maxLen, removeOnComplete/-Fail). */
const QUEUE_STRUCTURES = new Set(['meta', 'id', 'events', 'wait', 'paused', 'active', 'completed', 'failed', 'delayed',
  'prioritized', 'marker', 'stalled', 'stalled-check', 'limiter', 'pc', 'waiting-children', 'metrics']);
const JOB_STATES = ['wait', 'paused', 'active'] as const;
const JOB_SETS = ['completed', 'failed', 'delayed', 'prioritized', 'waiting-children'] as const;

/**
 * List every key with SCAN and check that each has a TTL or an owner. Owner kinds:
 * - `queue structure`: BullMQ's lists/sets/streams of a queue (bounded by its settings);
 * - `job record`: a job hash (and its `:logs`) that is listed in one of its queue's state lists
 *   or sets, so BullMQ's retention (age/count) removes it;
 * - `deduplication`: BullMQ's `de:<id>` marker of a job that exists and has not finished.
 * Keys of cmp-offload itself (blobs, uploads, cache entries, results, waiter counts, read
 * records) must all carry a TTL: they have no owner.
 */
export async function auditRedisKeys(url: string, prefix = '{cmp-offload}'): Promise<KeyAudit> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    const all: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await redis.scan(cursor, 'COUNT', 1000);
      cursor = next;
      all.push(...batch);
    } while (cursor !== '0');
    const audit: KeyAudit = { keys: all.length, withTtl: 0, owned: {}, orphans: [] };
    const own = (kind: string) => (audit.owned[kind] = (audit.owned[kind] ?? 0) + 1);
    for (const key of all) {
      const ttl = await redis.pttl(key);
      if (ttl === -2) continue; // gone meanwhile
      if (ttl >= 0) {
        audit.withTtl++;
        continue;
      }
      const kind = await ownerOf(redis, prefix, key);
      if (kind) own(kind);
      else audit.orphans.push(key);
    }
    return audit;
  } finally {
    redis.disconnect();
  }
}

async function ownerOf(redis: Redis, prefix: string, key: string): Promise<string | undefined> {
  if (!key.startsWith(`${prefix}:`)) return undefined;
  const parts = key.slice(prefix.length + 1).split(':');
  const [queue, second, third] = parts;
  if (!queue || second === undefined) return undefined;
  // Only BullMQ's own keys may live without a TTL; ours all start with a known kind.
  if (['blob', 'blob-upload', 'out', 'res', 'waiter-ids', 'reads', 'shapes', 'git-creds'].includes(queue)) return undefined;
  if (parts.length === 2 && QUEUE_STRUCTURES.has(second)) return 'queue structure';
  if (second === 'de' && third !== undefined) {
    const jobId = await redis.get(key);
    if (jobId && (await jobState(redis, prefix, queue, jobId)) === 'unfinished') return 'deduplication';
    return undefined;
  }
  if (parts.length === 2 || (parts.length === 3 && third === 'logs')) {
    const state = await jobState(redis, prefix, queue, second);
    return state ? 'job record' : undefined;
  }
  return undefined;
}

async function jobState(redis: Redis, prefix: string, queue: string, jobId: string): Promise<'unfinished' | 'finished' | undefined> {
  const base = `${prefix}:${queue}`;
  for (const list of JOB_STATES) if ((await redis.lpos(`${base}:${list}`, jobId)) !== null) return 'unfinished';
  for (const set of JOB_SETS) {
    if ((await redis.zscore(`${base}:${set}`, jobId)) !== null) return set === 'completed' || set === 'failed' ? 'finished' : 'unfinished';
  }
  return undefined;
}

/** The ids of every job a queue's state lists and sets name on one node (a snapshot, whatever their state). */
export async function jobIds(url: string, queue: string, prefix = '{cmp-offload}'): Promise<Set<string>> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    const base = `${prefix}:${queue}`;
    const ids = new Set<string>();
    for (const list of JOB_STATES) for (const id of await redis.lrange(`${base}:${list}`, 0, -1)) ids.add(id);
    for (const set of JOB_SETS) for (const id of await redis.zrange(`${base}:${set}`, 0, '-1')) ids.add(id);
    return ids;
  } finally {
    redis.disconnect();
  }
}
