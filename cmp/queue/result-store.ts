import type { RedisClient } from './redis-connection.js';
import { splitPool } from '../split/split-pool.js';
import type { PluginResult } from '../plugin/request.js';
import { gunzipStored, gzipStored } from './gzip-stored.js';
import { manifestsSummary, preparedOf, preparedResult, ResponseEncoder } from '../split/prepared.js';
import { sign, verify } from './signing.js';

const MAGIC = Buffer.from('CMPR1');
const SIG_BYTES = 32;
const DOMAIN = 'cmp-offload/result/v2';
/**
 * A generate result stored as its ManifestResponse (prepared.ts) rather than JSON: what the
 * proxy sends, read without parsing. Its own domain: a payload signed as one format never
 * verifies as the other.
 */
const MANIFESTS_MAGIC = Buffer.from('CMPM1');
const MANIFESTS_DOMAIN = 'cmp-offload/result-manifests/v1';

/**
 * A match or parameters result already as its JSON: the worker's runner client checks a
 * runner's answer and re-encodes its result in a thread (worker/answer-decoder.ts), so that a
 * large result never passes through the worker's event loop as strings (a generate result comes
 * back prepared, prepared.ts). Stored as is.
 */
export class EncodedResult {
  constructor(
    /** UTF-8 JSON of the PluginResult. */
    readonly json: Buffer,
  ) {}
}

/**
 * A stored result (cache entry or one job's result): magic, HMAC over the Redis key name, the
 * request it answers (`binding`: the cache key of a cache entry, the request digest of a job's
 * result) and the payload, gzip of the result's JSON; for a generate result, the gzip of its
 * ManifestResponse under MANIFESTS_MAGIC (prepared.ts), so that the proxy reads it back as what
 * it sends, without parsing a million strings (entries of the JSON form still read). An entry copied under another key, or
 * written for another request, does not verify. Compression of a large output runs off the
 * event loop (libuv pool), so it does not stall a worker's lock renewals; a small one is
 * compressed at once (gzipStored).
 */
export async function encodeResult(signingKey: Buffer, redisKey: string, binding: string, result: PluginResult | EncodedResult, form: StoredForm = 'manifests'): Promise<Buffer> {
  if (!(result instanceof EncodedResult) && result.kind === 'generate' && form === 'manifests') {
    // Read from an entry: its payload again, signed for this key. A plain result is small (prepared.ts).
    const prepared = preparedOf(result);
    const payload = prepared?.stored ?? (await gzipStored(prepared?.encoded ?? encodeManifests(result.manifests)));
    return Buffer.concat([MANIFESTS_MAGIC, sign(signingKey, MANIFESTS_DOMAIN, [redisKey, binding, payload]), payload]);
  }
  const payload = await gzipStored(result instanceof EncodedResult ? result.json : Buffer.from(JSON.stringify(result), 'utf8'));
  return Buffer.concat([MAGIC, sign(signingKey, DOMAIN, [redisKey, binding, payload]), payload]);
}

function encodeManifests(manifests: readonly string[]): Buffer {
  const encoder = new ResponseEncoder();
  for (const m of manifests) encoder.add(m);
  return encoder.finish();
}

/** Decode a stored result; undefined when it is malformed or its signature does not verify. */
export async function decodeResult(signingKey: Buffer, redisKey: string, binding: string, stored: Buffer): Promise<PluginResult | undefined> {
  if (stored.length < MAGIC.length + SIG_BYTES) return undefined;
  const magic = stored.subarray(0, MAGIC.length);
  const manifests = magic.equals(MANIFESTS_MAGIC);
  if (!manifests && !magic.equals(MAGIC)) return undefined;
  const sig = stored.subarray(MAGIC.length, MAGIC.length + SIG_BYTES);
  const payload = stored.subarray(MAGIC.length + SIG_BYTES);
  if (!verify(signingKey, manifests ? MANIFESTS_DOMAIN : DOMAIN, [redisKey, binding, payload], sig)) return undefined;
  let body: Buffer;
  try {
    body = await gunzipStored(payload);
  } catch {
    return undefined; // signed but not gzip: malformed, see above
  }
  if (manifests) {
    // Checked field by field (no strings made): what the gRPC server will send as it is.
    const summary = manifestsSummary(body);
    return summary && preparedResult({ ...summary, encoded: body, stored: payload });
  }
  // A large result is parsed, measured and encoded off the loop (a million manifests take seconds),
  // and stays encoded (prepared.ts).
  return splitPool.parseResult<PluginResult>(body, parseInline);
}

function parseInline(json: Buffer): PluginResult | undefined {
  try {
    const value = JSON.parse(json.toString('utf8')) as PluginResult;
    return value && typeof value === 'object' && typeof value.kind === 'string' ? value : undefined;
  } catch {
    return undefined; // not JSON: not a result
  }
}

/**
 * How a generate result is stored: `manifests` (CMPM1, read without parsing) or `json` (CMPR1),
 * the only form a proxy of an earlier version reads. A worker writes `json` for a job whose proxy
 * did not ask for `manifests` (JobRequest.resultForm), so that versions can be mixed in a rollout.
 */
export type StoredForm = 'manifests' | 'json';

/** Write a result under `redisKey` with a TTL. */
export async function writeResult(redis: RedisClient, signingKey: Buffer, redisKey: string, binding: string, result: PluginResult | EncodedResult, ttlMs: number, form: StoredForm = 'manifests'): Promise<void> {
  await redis.set(redisKey, await encodeResult(signingKey, redisKey, binding, result, form), 'PX', ttlMs);
}

export type ReadOutcome = { found: PluginResult } | { missing: true } | { invalid: true };

/** Read and verify the result under `redisKey`. */
export async function readResult(redis: RedisClient, signingKey: Buffer, redisKey: string, binding: string): Promise<ReadOutcome> {
  const stored = await redis.getBuffer(redisKey);
  if (stored === null) return { missing: true };
  const found = await decodeResult(signingKey, redisKey, binding, stored);
  return found ? { found } : { invalid: true };
}
