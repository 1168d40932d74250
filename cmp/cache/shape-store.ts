import { shapeId, type Shape } from './read-set.js';

/** Shapes kept per request family: different runs of one app may read different inputs. */
export const MAX_SHAPES_PER_KEY = 8;

interface Entry {
  shapes: Shape[];
  bytes: number;
  expires: number;
}

/**
 * Standalone mode's shape lists (traced cache): base key → the shapes of recent runs, most
 * recent first. An LRU bounded by approximate bytes, with the cache TTL.
 */
export class MemoryShapeStore {
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;

  constructor(
    private readonly maxBytes: number,
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  get(baseKey: string): Shape[] {
    const e = this.entries.get(baseKey);
    if (!e) return [];
    this.entries.delete(baseKey);
    if (e.expires <= this.now()) {
      this.bytes -= e.bytes;
      return [];
    }
    this.entries.set(baseKey, e);
    return e.shapes;
  }

  add(baseKey: string, shape: Shape): void {
    const id = shapeId(shape);
    const shapes = [shape, ...this.get(baseKey).filter(s => shapeId(s) !== id)].slice(0, MAX_SHAPES_PER_KEY);
    const bytes = shapes.reduce((n, s) => n + sizeOf(s), baseKey.length);
    if (bytes > this.maxBytes) return;
    this.drop(baseKey);
    this.entries.set(baseKey, { shapes, bytes, expires: this.now() + this.ttlMs });
    this.bytes += bytes;
    for (const [oldest, e] of this.entries) {
      if (this.bytes <= this.maxBytes) break;
      this.entries.delete(oldest);
      this.bytes -= e.bytes;
    }
  }

  clear(): void {
    this.entries.clear();
    this.bytes = 0;
  }

  private drop(baseKey: string): void {
    const e = this.entries.get(baseKey);
    if (!e) return;
    this.entries.delete(baseKey);
    this.bytes -= e.bytes;
  }
}

function sizeOf(s: Shape): number {
  let n = 64;
  for (const p of s.touched) n += p.length * 2 + 16;
  for (const p of s.listed) n += p.length * 2 + 16;
  return n;
}
