import type { PluginResult } from '../plugin/request.js';

interface Entry {
  value: PluginResult;
  bytes: number;
  expires: number;
}

/**
 * The standalone mode's output cache: an LRU bounded by the approximate size of its values,
 * with a TTL. A Map keeps insertion order, so re-inserting on a hit makes it an LRU.
 */
export class MemoryCache {
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;

  constructor(
    private readonly maxBytes: number,
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  get(key: string): PluginResult | undefined {
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

  set(key: string, value: PluginResult): void {
    const bytes = approximateSize(value) + key.length;
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

  stats(): { entries: number; bytes: number } {
    return { entries: this.entries.size, bytes: this.bytes };
  }
}

function approximateSize(value: PluginResult): number {
  if (value.kind === 'generate') return value.manifests.reduce((n, m) => n + m.length * 2 + 16, 64);
  return JSON.stringify(value).length * 2;
}
