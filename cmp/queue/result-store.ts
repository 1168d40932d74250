import type { RedisClient } from './redis-connection.js';
import { splitPool } from '../split/split-pool.js';
import type { PluginResult } from '../plugin/request.js';
import { gunzipStored, gzipStored } from './gzip-stored.js';
import { preparedOf } from '../split/prepared.js';
import { sign, verify } from './signing.js';

const MAGIC = Buffer.from('CMPR1');
const SIG_BYTES = 32;
const DOMAIN = 'cmp-offload/result/v2';

/**
 * A result already as its JSON: the worker's runner client checks a runner's answer and
 * re-encodes its result in a thread (worker/answer-decoder.ts), so that a large result
 * never passes through the worker's event loop as strings. Stored as is.
 */
export class EncodedResult {
  constructor(
    /** UTF-8 JSON of the PluginResult. */
    readonly json: Buffer,
    /** Bytes of its manifests (the cache's stored-bytes metric). */
    readonly manifestBytes: number,
  ) {}
}

/**
 * A stored result (cache entry or one job's result): magic, HMAC over the Redis key name, the
 * request it answers (`binding`: the cache key of a cache entry, the request digest of a job's
 * result) and the payload, gzip of the result's JSON. An entry copied under another key, or
 * written for another request, does not verify. Compression of a large output runs off the
 * event loop (libuv pool), so it does not stall a worker's lock renewals; a small one is
 * compressed at once (gzipStored).
 */
export async function encodeResult(signingKey: Buffer, redisKey: string, binding: string, result: PluginResult | EncodedResult): Promise<Buffer> {
  const payload = await payloadOf(result);
  return Buffer.concat([MAGIC, sign(signingKey, DOMAIN, [redisKey, binding, payload]), payload]);
}

/**
 * The gzip of a result's JSON. A prepared result (prepared.ts) read from an entry reuses that
 * entry's payload; one split here has its JSON written in a thread from its encoding: neither
 * becomes strings on this loop.
 */
async function payloadOf(result: PluginResult | EncodedResult): Promise<Buffer> {
  if (result instanceof EncodedResult) return gzipStored(result.json);
  const prepared = preparedOf(result);
  if (prepared?.storedJson) return prepared.storedJson;
  if (prepared) {
    const manifests = await splitPool.manifestsJson(prepared);
    return gzipStored(Buffer.concat([Buffer.from('{"kind":"generate","manifests":'), manifests, Buffer.from('}')]));
  }
  return gzipStored(Buffer.from(JSON.stringify(result), 'utf8'));
}

/** Decode a stored result; undefined when it is malformed or its signature does not verify. */
export async function decodeResult(signingKey: Buffer, redisKey: string, binding: string, stored: Buffer): Promise<PluginResult | undefined> {
  if (stored.length < MAGIC.length + SIG_BYTES || !stored.subarray(0, MAGIC.length).equals(MAGIC)) return undefined;
  const sig = stored.subarray(MAGIC.length, MAGIC.length + SIG_BYTES);
  const payload = stored.subarray(MAGIC.length + SIG_BYTES);
  if (!verify(signingKey, DOMAIN, [redisKey, binding, payload], sig)) return undefined;
  let json: Buffer;
  try {
    json = await gunzipStored(payload);
  } catch {
    return undefined; // signed but not gzip: malformed, see above
  }
  // A large result is parsed, measured and encoded off the loop (a million manifests take seconds),
  // and stays encoded (prepared.ts), its payload kept for a copy under another key.
  return splitPool.parseResult<PluginResult>(json, parseInline, payload);
}

function parseInline(json: Buffer): PluginResult | undefined {
  try {
    const value = JSON.parse(json.toString('utf8')) as PluginResult;
    return value && typeof value === 'object' && typeof value.kind === 'string' ? value : undefined;
  } catch {
    return undefined; // not JSON: not a result
  }
}

/** Write a result under `redisKey` with a TTL. */
export async function writeResult(redis: RedisClient, signingKey: Buffer, redisKey: string, binding: string, result: PluginResult | EncodedResult, ttlMs: number): Promise<void> {
  await redis.set(redisKey, await encodeResult(signingKey, redisKey, binding, result), 'PX', ttlMs);
}

export type ReadOutcome = { found: PluginResult } | { missing: true } | { invalid: true };

/** Read and verify the result under `redisKey`. */
export async function readResult(redis: RedisClient, signingKey: Buffer, redisKey: string, binding: string): Promise<ReadOutcome> {
  const stored = await redis.getBuffer(redisKey);
  if (stored === null) return { missing: true };
  const found = await decodeResult(signingKey, redisKey, binding, stored);
  return found ? { found } : { invalid: true };
}
