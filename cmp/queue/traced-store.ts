import type { RedisClient } from './redis-connection.js';
import { MAX_SHAPES_PER_KEY } from '../cache/shape-store.js';
import { shapeIdOf, type Shape } from '../cache/read-set.js';
import type { RecordedReads } from '../trace/read-recorder.js';
import { gunzipStored, gzipStored } from './gzip-stored.js';
import { sign, verify } from './signing.js';

const READS_DOMAIN = 'cmp-offload/reads/v1';
const SHAPE_DOMAIN = 'cmp-offload/shape/v1';
const SIG_BYTES = 32;
/** A stored record larger than this is refused when read (hostile Redis content). */
const MAX_STORED_BYTES = 64 * 1024 * 1024;

/**
 * Distributed mode's traced cache records. Both are signed and bound to their Redis key (and
 * field), so only a worker or proxy holding the key could have written them: a forged read
 * record would otherwise let anyone with Redis access store a result under too small a shape.
 */
export async function seal(signingKey: Buffer, parts: string[], value: unknown): Promise<Buffer> {
  const payload = await gzipStored(Buffer.from(JSON.stringify(value), 'utf8'));
  return Buffer.concat([sign(signingKey, parts[0]!, [...parts.slice(1), payload]), payload]);
}

export async function unseal(signingKey: Buffer, parts: string[], stored: Buffer): Promise<unknown> {
  if (stored.length < SIG_BYTES || stored.length > MAX_STORED_BYTES) return undefined;
  const sig = stored.subarray(0, SIG_BYTES);
  const memoKey = `${signerId(signingKey)}\0${parts.join('\0')}\0${sig.toString('base64')}`;
  const known = opened.get(memoKey);
  if (known !== undefined && known.stored.equals(stored)) {
    opened.delete(memoKey);
    opened.set(memoKey, known);
    return known.value;
  }
  const payload = stored.subarray(SIG_BYTES);
  if (!verify(signingKey, parts[0]!, [...parts.slice(1), payload], sig)) return undefined;
  let value: unknown;
  try {
    value = JSON.parse((await gunzipStored(payload, MAX_STORED_BYTES)).toString('utf8'));
  } catch {
    return undefined; // signed but does not open: as if nothing were stored
  }
  remember(memoKey, Buffer.from(stored), value);
  return value;
}

/**
 * Records opened lately, by key parts and signature, with the bytes they were opened from: a
 * cache hit reads the same shapes and app records each time, and opening one (HMAC, gunzip,
 * JSON) cost more than the hit itself. Only bytes equal to those that verified are answered
 * from here. Bounded by MEMO_BYTES of stored bytes; callers treat the values as read-only.
 */
const opened = new Map<string, { stored: Buffer; value: unknown }>();
let openedBytes = 0;
const MEMO_BYTES = 8 * 1024 * 1024;

const signerIds = new WeakMap<Buffer, number>();
let signers = 0;
/** Which signing key a memo entry verified under (tests use several). */
function signerId(signingKey: Buffer): number {
  let id = signerIds.get(signingKey);
  if (id === undefined) signerIds.set(signingKey, (id = ++signers));
  return id;
}

function remember(key: string, stored: Buffer, value: unknown): void {
  if (stored.length > MEMO_BYTES / 8) return;
  const old = opened.get(key);
  if (old) openedBytes -= old.stored.length;
  opened.delete(key);
  opened.set(key, { stored, value });
  openedBytes += stored.length;
  for (const [k, v] of opened) {
    if (openedBytes <= MEMO_BYTES) break;
    opened.delete(k);
    openedBytes -= v.stored.length;
  }
}

/** The worker: what a job's run read, next to its whole-tree cache entry. */
export async function writeReads(redis: RedisClient, signingKey: Buffer, redisKey: string, reads: RecordedReads, ttlMs: number): Promise<void> {
  await redis.set(redisKey, await seal(signingKey, [READS_DOMAIN, redisKey], reads), 'PX', ttlMs);
}

/** The proxy: the read record of a finished job; undefined when missing, expired or not verifying. */
export async function readReads(redis: RedisClient, signingKey: Buffer, redisKey: string): Promise<RecordedReads | undefined> {
  const stored = await redis.getBuffer(redisKey);
  if (stored === null) return undefined;
  const v = (await unseal(signingKey, [READS_DOMAIN, redisKey], stored)) as RecordedReads | undefined;
  if (!v || typeof v !== 'object') return undefined;
  if (v.complete === false && typeof v.reason === 'string') return v;
  const lists = v.complete === true && [v.touched, v.listed, v.moved, v.traversed].every(l => Array.isArray(l) && l.every(p => typeof p === 'string'));
  return lists ? v : undefined;
}

/** The shapes recorded for a request family (a hash: shape id → signed shape), most recent first. */
export async function readShapes(redis: RedisClient, signingKey: Buffer, redisKey: string): Promise<Shape[]> {
  const fields = await redis.hgetallBuffer(redisKey);
  const found: Array<{ at: number; shape: Shape }> = [];
  for (const [id, stored] of Object.entries(fields).slice(0, MAX_SHAPES_PER_KEY * 2)) {
    const v = (await unseal(signingKey, [SHAPE_DOMAIN, redisKey, id], stored)) as { at?: unknown; shape?: Shape } | undefined;
    const s = v?.shape;
    if (typeof v?.at !== 'number' || !s || !Array.isArray(s.touched) || !Array.isArray(s.listed) || typeof s.revision !== 'boolean') continue;
    // The field is the shape's id (addShape), bound to it by the signature: no need to hash it again.
    shapeIdOf(s, id);
    found.push({ at: v.at, shape: s });
  }
  return found.sort((a, b) => b.at - a.at).map(f => f.shape);
}

/** Remember a shape for a request family; beyond MAX_SHAPES_PER_KEY the oldest go. Every write renews the TTL. */
export async function addShape(redis: RedisClient, signingKey: Buffer, redisKey: string, id: string, shape: Shape, ttlMs: number): Promise<void> {
  const at = Date.now();
  await redis.multi().hset(redisKey, id, await seal(signingKey, [SHAPE_DOMAIN, redisKey, id], { at, shape })).pexpire(redisKey, ttlMs).exec();
  if ((await redis.hlen(redisKey)) <= MAX_SHAPES_PER_KEY) return;
  const all = await redis.hgetallBuffer(redisKey);
  const aged: Array<{ id: string; at: number }> = [];
  for (const [field, stored] of Object.entries(all)) {
    const v = (await unseal(signingKey, [SHAPE_DOMAIN, redisKey, field], stored)) as { at?: unknown } | undefined;
    aged.push({ id: field, at: typeof v?.at === 'number' ? v.at : 0 });
  }
  aged.sort((a, b) => b.at - a.at);
  const stale = aged.slice(MAX_SHAPES_PER_KEY).map(a => a.id);
  if (stale.length > 0) await redis.hdel(redisKey, ...stale);
}
