import type { PluginResult } from '../plugin/request.js';
import { preparedOf } from '../split/prepared.js';

interface Entry<V> {
  value: V;
  bytes: number;
  expires: number;
}

/**
 * An in-memory LRU bounded by the approximate size of its values, with a TTL. A Map keeps
 * insertion order, so re-inserting on a hit makes it an LRU.
 */
export class ByteLru<V> {
  private readonly entries = new Map<string, Entry<V>>();
  private bytes = 0;

  constructor(
    private readonly maxBytes: number,
    private readonly ttlMs: number,
    private readonly sizeOf: (value: V) => number,
    private readonly now: () => number = Date.now,
  ) {}

  get(key: string): V | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    this.entries.delete(key);
    if (entry.expires <= this.now()) {
      this.bytes -= entry.bytes;
      return undefined;
    }
    this.entries.set(key, entry);
    return entry.value;
  }

  /** The value under `key` without counting it as a use (its place in the LRU stays). */
  peek(key: string): V | undefined {
    const entry = this.entries.get(key);
    return entry && entry.expires > this.now() ? entry.value : undefined;
  }

  set(key: string, value: V): void {
    const bytes = this.sizeOf(value) + key.length;
    if (bytes > this.maxBytes) return;
    this.delete(key);
    this.entries.set(key, { value, bytes, expires: this.now() + this.ttlMs });
    this.bytes += bytes;
    for (const [oldest, entry] of this.entries) {
      if (this.bytes <= this.maxBytes) break;
      this.entries.delete(oldest);
      this.bytes -= entry.bytes;
    }
  }

  delete(key: string): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    this.bytes -= entry.bytes;
  }

  clear(): void {
    this.entries.clear();
    this.bytes = 0;
  }

  /** The entries not expired, oldest use first, without touching their recency. */
  *live(): IterableIterator<[string, V]> {
    const now = this.now();
    for (const [key, entry] of this.entries) if (entry.expires > now) yield [key, entry.value];
  }

  stats(): { entries: number; bytes: number } {
    return { entries: this.entries.size, bytes: this.bytes };
  }
}

/** The standalone mode's output cache. */
export class MemoryCache extends ByteLru<PluginResult> {
  constructor(maxBytes: number, ttlMs: number, now: () => number = Date.now) {
    super(maxBytes, ttlMs, approximateSize, now);
  }
}

function approximateSize(value: PluginResult): number {
  if (value.kind === 'generate') {
    // Prepared off the loop: the encoding is all it holds (no strings), and no pass over them here.
    const prepared = preparedOf(value);
    if (prepared) return prepared.encoded.length + (prepared.stored?.length ?? 0) + 64;
    return value.manifests.reduce((n, m) => n + m.length * 2 + 16, 64);
  }
  return JSON.stringify(value).length * 2;
}
