import { isAppPathsRecord, sourceIdOf, unchanged, type AppPathsRecord, type AppPathsStore } from '../cache/app-paths.js';
import { scanBatches } from './cache-admin.js';
import type { KeySpace } from './keys.js';
import { publishPathsNotice } from './paths-notice.js';
import type { RedisClient } from './redis-connection.js';
import { seal, unseal } from './traced-store.js';

const PATHS_DOMAIN = 'cmp-offload/app-paths/v1';
/** Sources kept per app; past them the oldest go (an app whose source path keeps changing). */
const MAX_SOURCES = 8;

/**
 * Distributed mode's per-app manifest-generate-paths records: one hash per Application, a
 * field per source, each record signed and bound to its key and field like the
 * other traced records (a forged value could make Argo CD skip a needed refresh). Every write
 * renews the hash's TTL; each record also carries its own end, so a source no longer generated
 * stops counting after the cache TTL even while another keeps the hash alive. A write that
 * changes an app's value (or adds a source) is announced to the keeper on the paths channel.
 */
export class RedisAppPaths implements AppPathsStore {
  constructor(
    private readonly redis: RedisClient,
    private readonly signingKey: Buffer,
    private readonly keys: KeySpace,
    private readonly now: () => number = Date.now,
  ) {}

  async put(record: AppPathsRecord): Promise<void> {
    const key = this.keys.appPaths(record.app);
    const id = sourceIdOf(record);
    const sealed = await seal(this.signingKey, [PATHS_DOMAIN, key, id], record);
    await this.redis.multi().hset(key, id, sealed).pexpireat(key, record.until).exec();
    if ((await this.redis.hlen(key)) <= MAX_SOURCES) return;
    const stale = (await this.read(key, true)).sort((a, b) => b.record.at - a.record.at).slice(MAX_SOURCES).map(r => r.id);
    if (stale.length > 0) await this.redis.hdel(key, ...stale);
  }

  async note(record: AppPathsRecord, refreshMs: number): Promise<boolean> {
    const key = this.keys.appPaths(record.app);
    const id = sourceIdOf(record);
    const stored = await this.redis.hgetBuffer(key, id);
    const current = stored ? await this.verified(key, id, stored) : undefined;
    const now = this.now();
    if (unchanged(current, record, refreshMs, now)) return false;
    await this.put(record);
    const live = current && current.until > now ? current : undefined;
    if (!live || live.value !== record.value) await publishPathsNotice(this.redis, this.keys, this.signingKey, record.app, now);
    return true;
  }

  async get(app: string): Promise<AppPathsRecord[]> {
    return (await this.read(this.keys.appPaths(app), false)).map(r => r.record).filter(r => r.app === app);
  }

  async all(): Promise<Map<string, AppPathsRecord[]>> {
    const out = new Map<string, AppPathsRecord[]>();
    await scanBatches(this.redis, this.keys.appPathsPattern(), async batch => {
      for (const key of batch) {
        for (const { record } of await this.read(key, false)) {
          if (key !== this.keys.appPaths(record.app)) continue;
          out.set(record.app, [...(out.get(record.app) ?? []), record]);
        }
      }
    });
    return out;
  }

  /** The verifying records of one hash; expired ones too when `expired` (to prune them). */
  private async read(key: string, expired: boolean): Promise<Array<{ id: string; record: AppPathsRecord }>> {
    const fields = await this.redis.hgetallBuffer(key);
    const now = this.now();
    const out: Array<{ id: string; record: AppPathsRecord }> = [];
    for (const [id, stored] of Object.entries(fields).slice(0, MAX_SOURCES * 2)) {
      const v = await this.verified(key, id, stored);
      if (v && (expired || v.until > now)) out.push({ id, record: v });
    }
    return out;
  }

  /** The record stored in one field, if it verifies and belongs there. */
  private async verified(key: string, id: string, stored: Buffer): Promise<AppPathsRecord | undefined> {
    const v = await unseal(this.signingKey, [PATHS_DOMAIN, key, id], stored);
    return isAppPathsRecord(v) && sourceIdOf(v) === id ? v : undefined;
  }
}
