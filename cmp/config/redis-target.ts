import { OptionsError } from './env-values.js';

// CMP_OFFLOAD_REDIS_URL: its three forms (one server, Sentinel, Cluster), parsed without echoing
// a password in any error.

/** A `host:port` of a sentinel or a cluster seed node. */
export interface RedisHost {
  host: string;
  port: number;
}

/**
 * Where Redis is, parsed from CMP_OFFLOAD_REDIS_URL (one setting for every form, so that the
 * proxy, the worker, the `cache` CLI and the Kubernetes Secret keep one key):
 * - `redis://[user:password@]host[:port][/db]`, `rediss://…`: one Redis (TLS with `rediss`);
 * - `redis+sentinel://[user:password@]host[:port],host[:port]…/<master name>[/db]`,
 *   `rediss+sentinel://…`: the master of a Sentinel group (TLS to the sentinels and the data
 *   nodes with `rediss`); the credentials are the data nodes'; the sentinels' own come from
 *   CMP_OFFLOAD_REDIS_SENTINEL_USERNAME and CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD(_FILE);
 * - `redis+cluster://[user:password@]host[:port],host[:port]…`, `rediss+cluster://…`: a Redis
 *   Cluster, from one or more seed nodes (database 0 only, as in any cluster).
 * Default ports: 26379 for sentinels, 6379 otherwise. Reserved characters in the user name or
 * password must be percent-encoded, as in any URL.
 */
export type RedisTarget =
  | { kind: 'standalone'; url: string }
  | {
      kind: 'sentinel';
      sentinels: RedisHost[];
      masterName: string;
      db: number;
      tls: boolean;
      username: string | undefined;
      password: string | undefined;
      sentinelUsername: string | undefined;
      sentinelPassword: string | undefined;
    }
  | { kind: 'cluster'; nodes: RedisHost[]; tls: boolean; username: string | undefined; password: string | undefined };

const REDIS_URL_FORMS =
  'redis://[user:password@]host:port[/db], redis+sentinel://[user:password@]host:port,host:port/<master name>[/db], redis+cluster://[user:password@]host:port,host:port (rediss… for TLS)';

/** CMP_OFFLOAD_REDIS_URL's error: names the part that is wrong, never echoes the URL (it may hold a password). */
function badRedisUrl(why: string): never {
  throw new OptionsError(`invalid value for CMP_OFFLOAD_REDIS_URL: ${why}; expected ${REDIS_URL_FORMS}`);
}

/** Parse CMP_OFFLOAD_REDIS_URL into one of the three forms of `RedisTarget`. */
export function redisTarget(url: string): RedisTarget {
  const m = /^([a-z][a-z0-9+.-]*):\/\/(.*)$/is.exec(url);
  if (!m) badRedisUrl('not a URL');
  const scheme = m[1]!.toLowerCase();
  if (scheme === 'redis' || scheme === 'rediss') {
    if (/^[^/]*,/.test(m[2]!.slice(m[2]!.lastIndexOf('@') + 1))) badRedisUrl('several hosts need redis+sentinel:// or redis+cluster://');
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      return badRedisUrl('not a valid URL');
    }
    if (parsed.hostname === '') badRedisUrl('no host');
    return { kind: 'standalone', url };
  }
  const kind = /^rediss?\+(sentinel|cluster)$/.exec(scheme)?.[1] as 'sentinel' | 'cluster' | undefined;
  if (!kind) badRedisUrl(`unknown scheme ${JSON.stringify(scheme.slice(0, 32))}`);
  const tls = scheme.startsWith('rediss');
  let rest = m[2]!;
  if (/[?#]/.test(rest)) badRedisUrl('query strings and fragments are not supported');
  // The credentials end at the last "@" (a password may hold "/", a master name never holds "@").
  const at = rest.lastIndexOf('@');
  let username: string | undefined;
  let password: string | undefined;
  if (at >= 0) {
    const userinfo = rest.slice(0, at);
    rest = rest.slice(at + 1);
    const colon = userinfo.indexOf(':');
    try {
      username = decodeURIComponent(colon < 0 ? userinfo : userinfo.slice(0, colon)) || undefined;
      password = colon < 0 ? undefined : decodeURIComponent(userinfo.slice(colon + 1)) || undefined;
    } catch {
      badRedisUrl('bad percent-encoding in the credentials');
    }
  }
  const slash = rest.indexOf('/');
  const hostList = slash < 0 ? rest : rest.slice(0, slash);
  const segments = slash < 0 ? [] : rest.slice(slash + 1).split('/');
  const hosts = hostList.split(',').map(h => redisHost(h, kind === 'sentinel' ? 26379 : 6379));
  if (kind === 'cluster') {
    if (segments.length > 1 || (segments[0] !== undefined && segments[0] !== '' && segments[0] !== '0')) {
      badRedisUrl('a cluster has only database 0 (no path after the nodes)');
    }
    return { kind, nodes: hosts, tls, username, password };
  }
  let masterName = '';
  try {
    masterName = decodeURIComponent(segments[0] ?? '');
  } catch {
    badRedisUrl('bad percent-encoding in the master name');
  }
  if (masterName === '') badRedisUrl('a sentinel URL needs the master name as its path (/mymaster)');
  const dbText = segments[1];
  if (segments.length > 2 || (dbText !== undefined && dbText !== '' && !/^\d{1,5}$/.test(dbText))) {
    badRedisUrl('after the master name only a database number may follow (/mymaster/0)');
  }
  return {
    kind,
    sentinels: hosts,
    masterName,
    db: dbText ? Number(dbText) : 0,
    tls,
    username,
    password,
    sentinelUsername: undefined,
    sentinelPassword: undefined,
  };
}

/** `host`, `host:port`, `[v6]` or `[v6]:port`. */
function redisHost(raw: string, defaultPort: number): RedisHost {
  const m = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(\d{1,5}))?$/.exec(raw);
  if (!m) badRedisUrl(raw === '' ? 'an empty host in the host list' : 'a host in the list is not host[:port]');
  const port = m[2] === undefined ? defaultPort : Number(m[2]);
  if (port < 1 || port > 65535) badRedisUrl('a port out of range');
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port };
}

/**
 * Any form of CMP_OFFLOAD_REDIS_URL without its credentials (and with a marker instead of
 * anything that does not parse), for logs and error texts.
 */
export function redactRedisUrl(url: string): string {
  const m = /^([a-z][a-z0-9+.-]*):\/\/(.*)$/is.exec(url);
  if (!m) return '<invalid URL>';
  const rest = m[2]!;
  const at = rest.lastIndexOf('@');
  const hostAndPath = (at >= 0 ? rest.slice(at + 1) : rest).replace(/[?#].*$/s, '');
  const scheme = m[1]!.toLowerCase();
  if (scheme === 'redis' || scheme === 'rediss') {
    try {
      const u = new URL(url);
      return `${u.protocol}//${u.host}${u.pathname === '/' ? '' : u.pathname}`;
    } catch {
      return '<invalid URL>'; // nothing of it can be shown safely
    }
  }
  return `${scheme}://${hostAndPath.replace(/\/$/, '')}`;
}

/**
 * The Redis Cluster hash tag of a key prefix: the text between its first `{` and the first `}`
 * after it, when not empty (Redis's rule); undefined when the prefix has none.
 */
export function hashTag(prefix: string): string | undefined {
  const open = prefix.indexOf('{');
  if (open < 0) return undefined;
  const close = prefix.indexOf('}', open + 1);
  return close > open + 1 ? prefix.slice(open + 1, close) : undefined;
}
