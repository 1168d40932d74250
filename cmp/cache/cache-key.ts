import { createHash } from 'node:crypto';
import { GIT_CREDS_ENV } from '../askpass/git-creds-env.js';
import type { EnvEntry, RpcKind } from '../plugin/request.js';

/** Bumped whenever the encoding below or the meaning of a cached value changes. */
const KEY_VERSION = 'cmp-offload/cache/v1';

export interface CacheKeyInput {
  /** Plugin name as Applications use it: the socket file name without `.sock`. */
  plugin: string;
  /** Digest of the normalised plugin spec: a changed plugin.yaml never hits old entries. */
  specDigest: string;
  /** CMP_OFFLOAD_CACHE_SALT, e.g. the worker image tag. */
  salt: string;
  kind: RpcKind;
  appRelPath: string;
  env: readonly EnvEntry[];
  ignoreEnv: ReadonlySet<string>;
  /** Content digest of the tree (mtimes, owners and entry order do not count). */
  contentDigest: string;
}

/**
 * The output cache key (docs/traced-cache.md#output-cache): sha256 over a versioned JSON array, which is an
 * unambiguous encoding of its parts. The env is taken as the command would see it: entries
 * rendered `name=value`, later ones overriding earlier ones of the same name (Go exec's rule),
 * ignored names, Argo's git credentials names and empty names dropped, then sorted.
 */
export function cacheKey(input: CacheKeyInput): string {
  const effective = new Map<string, string>();
  for (const { name, value } of input.env) {
    if (name === '') continue;
    const rendered = `${name}=${value}`;
    const key = rendered.slice(0, rendered.indexOf('='));
    // Argo's git credentials env (a fresh nonce and temp file paths per call, secret headers):
    // it decides how the repository is reached, not what is generated.
    if (input.ignoreEnv.has(key) || GIT_CREDS_ENV.has(key)) continue;
    effective.delete(key);
    effective.set(key, rendered);
  }
  const env = [...effective.values()].sort(byteOrder);
  const encoded = JSON.stringify([
    KEY_VERSION,
    input.plugin,
    input.specDigest,
    input.salt,
    input.kind,
    input.appRelPath,
    env,
    input.contentDigest,
  ]);
  return createHash('sha256').update(encoded).digest('hex');
}

function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}
