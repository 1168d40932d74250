import { ByteLru } from './memory-cache.js';
import { shapeId, type Shape } from './read-set.js';

/** Shapes kept per request family: different runs of one app may read different inputs. */
export const MAX_SHAPES_PER_KEY = 8;

/**
 * Standalone mode's shape lists (traced cache): base key → the shapes of recent runs, most
 * recent first, in an LRU bounded by approximate bytes, with the cache TTL.
 */
export class MemoryShapeStore {
  private readonly lru: ByteLru<Shape[]>;

  constructor(maxBytes: number, ttlMs: number, now: () => number = Date.now) {
    this.lru = new ByteLru(maxBytes, ttlMs, shapes => shapes.reduce((n, s) => n + sizeOf(s), 0), now);
  }

  get(baseKey: string): Shape[] {
    return this.lru.get(baseKey) ?? [];
  }

  add(baseKey: string, shape: Shape): void {
    const id = shapeId(shape);
    this.lru.set(baseKey, [shape, ...this.get(baseKey).filter(s => shapeId(s) !== id)].slice(0, MAX_SHAPES_PER_KEY));
  }

  clear(): void {
    this.lru.clear();
  }
}

function sizeOf(s: Shape): number {
  let n = 64;
  for (const p of s.touched) n += p.length * 2 + 16;
  for (const p of s.listed) n += p.length * 2 + 16;
  return n;
}
