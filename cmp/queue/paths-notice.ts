import type { KeySpace } from './keys.js';
import type { RedisClient } from './redis-connection.js';
import { sign, verify } from './signing.js';

const DOMAIN = 'cmp-offload/paths-notice/v1';
/** A notice older (or newer, clock skew) than this is refused: a captured one cannot be replayed much later. */
export const NOTICE_MAX_AGE_MS = 60_000;

/**
 * Tell the keeper (`cmp-offload keeper`) that an app's manifest-generate-paths record changed.
 * Pub/sub: no key is created, and a notice nobody hears is repaired by the keeper's resync.
 * It names the app only: the keeper reads the signed records themselves. Signed and dated
 * anyway, so that whoever can publish on Redis cannot make the keeper call the Kubernetes API
 * at will.
 */
export async function publishPathsNotice(redis: RedisClient, keys: KeySpace, signingKey: Buffer, app: string, now = Date.now()): Promise<void> {
  const sig = sign(signingKey, DOMAIN, [app, String(now)]).toString('hex');
  await redis.publish(keys.pathsChannel(), JSON.stringify({ app, at: now, sig }));
}

/** The app a message of the paths channel names, or undefined when it is not a fresh notice of ours. */
export function parsePathsNotice(signingKey: Buffer, raw: string, now = Date.now()): string | undefined {
  try {
    const m = JSON.parse(raw) as { app?: unknown; at?: unknown; sig?: unknown };
    if (typeof m.app !== 'string' || m.app === '' || typeof m.at !== 'number' || !Number.isSafeInteger(m.at)) return undefined;
    if (Math.abs(now - m.at) > NOTICE_MAX_AGE_MS) return undefined;
    if (typeof m.sig !== 'string' || !/^[0-9a-f]{64}$/.test(m.sig)) return undefined;
    return verify(signingKey, DOMAIN, [m.app, String(m.at)], Buffer.from(m.sig, 'hex')) ? m.app : undefined;
  } catch {
    return undefined; // malformed: dropped like any unsigned notice
  }
}
