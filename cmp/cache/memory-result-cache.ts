import type { PluginResult } from '../plugin/request.js';
import { MemoryCache } from './memory-cache.js';
import type { Shape } from './read-set.js';
import type { ResultCache } from './result-cache.js';
import { MemoryShapeStore } from './shape-store.js';

/**
 * Standalone mode's result cache: results in a bounded LRU, and the shapes of traced runs per
 * request family in another, a quarter of the cache budget.
 */
export class MemoryResultCache implements ResultCache {
  readonly results: MemoryCache;
  private readonly shapeLists: MemoryShapeStore;

  constructor(maxBytes: number, ttlMs: number, now: () => number = Date.now) {
    this.results = new MemoryCache(maxBytes, ttlMs, now);
    this.shapeLists = new MemoryShapeStore(Math.ceil(maxBytes / 4), ttlMs, now);
  }

  async read(key: string): Promise<PluginResult | undefined> {
    return this.results.get(key);
  }

  async has(key: string): Promise<boolean> {
    return this.results.get(key) !== undefined;
  }

  async write(key: string, result: PluginResult): Promise<void> {
    this.results.set(key, result);
  }

  async shapes(baseKey: string): Promise<Shape[]> {
    return this.shapeLists.get(baseKey);
  }

  async addShape(baseKey: string, shape: Shape): Promise<void> {
    this.shapeLists.add(baseKey, shape);
  }

  clear(): void {
    this.results.clear();
    this.shapeLists.clear();
  }
}
