import type { ResultCache } from '../cache/result-cache.js';
import { shapeId, type Shape } from '../cache/read-set.js';
import type { Logger } from '../log.js';
import type { PluginResult } from '../plugin/request.js';
import type { RecordedReads } from '../trace/read-recorder.js';
import type { KeySpace } from './keys.js';
import type { RedisClient } from './redis-connection.js';
import { readResult, writeResult } from './result-store.js';
import { addShape, readReads, readShapes } from './traced-store.js';

export interface RedisResultCacheDeps {
  redis: RedisClient;
  signingKey: Buffer;
  keys: KeySpace;
  plugin: string;
  /** Entries are kept per app (keys.ts): this store is one app's. */
  app: string;
  ttlMs: number;
  log: Logger;
}

/**
 * Distributed mode's result cache for one app of one plugin: signed entries and shape lists in
 * Redis (result-store.ts, traced-store.ts), shared by every proxy and worker.
 */
export class RedisResultCache implements ResultCache {
  constructor(private readonly d: RedisResultCacheDeps) {}

  /** A mis-signed entry is a miss, and logged: someone with Redis access wrote it, or the key changed. */
  async read(key: string): Promise<PluginResult | undefined> {
    const redisKey = this.entryKey(key);
    const r = await readResult(this.d.redis, this.d.signingKey, redisKey, key);
    if ('invalid' in r) this.d.log.warn({ key: redisKey }, 'ignoring a cache entry whose signature does not verify');
    return 'found' in r ? r.found : undefined;
  }

  async has(key: string): Promise<boolean> {
    return (await this.d.redis.exists(this.entryKey(key))) > 0;
  }

  write(key: string, result: PluginResult): Promise<void> {
    return writeResult(this.d.redis, this.d.signingKey, this.entryKey(key), key, result, this.d.ttlMs);
  }

  shapes(baseKey: string): Promise<Shape[]> {
    return readShapes(this.d.redis, this.d.signingKey, this.shapesKey(baseKey));
  }

  addShape(baseKey: string, shape: Shape): Promise<void> {
    return addShape(this.d.redis, this.d.signingKey, this.shapesKey(baseKey), shapeId(shape), shape, this.d.ttlMs);
  }

  /** What the worker's run of `key` read, left beside the whole-tree entry it stored. */
  workerReads(key: string): Promise<RecordedReads | undefined> {
    return readReads(this.d.redis, this.d.signingKey, this.d.keys.tracedReads(this.d.plugin, this.d.app, key));
  }

  private entryKey(key: string): string {
    return this.d.keys.cacheEntry(this.d.plugin, this.d.app, key);
  }

  private shapesKey(baseKey: string): string {
    return this.d.keys.tracedShapes(this.d.plugin, this.d.app, baseKey);
  }
}
