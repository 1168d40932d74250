import type { EnvEntry } from '../plugin/request.js';

/**
 * Names of everything distributed mode writes to Redis. Every key and channel starts with the
 * configured prefix (default `{cmp-offload}`): the hash tag puts them all in one Redis Cluster
 * slot, which BullMQ's multi-key scripts and our RENAME need, and two installations with
 * different prefixes can share one Redis. Variable parts are escaped so that they never
 * contain `:` or glob characters: `SCAN MATCH` patterns built from them stay exact.
 */
export class KeySpace {
  constructor(readonly prefix: string) {}

  /** The tarball blob of a content: its sha256 names it. */
  blob(sha256: string): string {
    return `${this.prefix}:blob:${sha256}`;
  }

  /** Where one upload assembles a blob before the atomic RENAME (concurrent uploads never mix). */
  blobUpload(sha256: string, uploadId: string): string {
    return `${this.prefix}:blob-upload:${sha256}:${uploadId}`;
  }

  /** An output cache entry: plugin and app in the name so that purges can match them. */
  cacheEntry(plugin: string, app: string, cacheKey: string): string {
    return `${this.prefix}:out:${escapeKeyPart(plugin)}:${escapeKeyPart(app)}:${cacheKey}`;
  }

  /** What the run behind a cache entry read (traced cache), written by the worker for the proxy. */
  tracedReads(plugin: string, app: string, cacheKey: string): string {
    return `${this.prefix}:reads:${escapeKeyPart(plugin)}:${escapeKeyPart(app)}:${cacheKey}`;
  }

  /** The read shapes of a request family (traced cache): a hash of shape id → signed shape. */
  tracedShapes(plugin: string, app: string, baseKey: string): string {
    return `${this.prefix}:shapes:${escapeKeyPart(plugin)}:${escapeKeyPart(app)}:${baseKey}`;
  }

  /** One Application's manifest-generate-paths records (traced cache): a hash of source id → signed record. */
  appPaths(app: string): string {
    return `${this.prefix}:paths:${escapeKeyPart(app)}`;
  }

  /** SCAN pattern of every app's manifest-generate-paths records. */
  appPathsPattern(): string {
    return `${globEscape(this.prefix)}:paths:*`;
  }

  /** SCAN pattern of cache entries, optionally of one plugin and/or one app. */
  cachePattern(filter: { plugin?: string; app?: string } = {}): string {
    const plugin = filter.plugin === undefined ? '*' : escapeKeyPart(filter.plugin);
    const app = filter.app === undefined ? '*' : escapeKeyPart(filter.app);
    return `${globEscape(this.prefix)}:out:${plugin}:${app}:*`;
  }

  /** SCAN pattern of every blob. */
  blobPattern(): string {
    return `${globEscape(this.prefix)}:blob:*`;
  }

  /** The result of a job whose output is not cached (short TTL). */
  result(queue: string, jobId: string): string {
    return `${this.prefix}:res:${escapeKeyPart(queue)}:${escapeKeyPart(jobId)}`;
  }

  /**
   * The callers, on any proxy, waiting for the runs of one request (a sorted set of waiter ids:
   * waiters.ts). Not `waiters:`, where earlier versions kept a plain count of them.
   */
  waiters(queue: string, waitId: string): string {
    return `${this.prefix}:waiter-ids:${escapeKeyPart(queue)}:${waitId}`;
  }

  /** Pub/sub channel on which proxies tell the keeper that an app's manifest-generate-paths changed. */
  pathsChannel(): string {
    return `${this.prefix}:paths-changed`;
  }

  /** Pub/sub channel on which workers ask the proxy that submitted a job for its git credentials (provideGitCreds). */
  gitCredsChannel(): string {
    return `${this.prefix}:git-creds`;
  }

  /** Where that proxy leaves one answer, sealed for the job and lookup; read once by the worker. */
  gitCredsAnswer(jobId: string, lookupId: string): string {
    return `${this.prefix}:git-creds:${escapeKeyPart(jobId)}:${escapeKeyPart(lookupId)}`;
  }

  /** Pub/sub channel on which proxies ask whichever worker holds a job to stop it. */
  cancelChannel(): string {
    return `${this.prefix}:cancel`;
  }
}

/** Plugin name as Applications use it and as the queue is named: the socket file name without `.sock`. */
export function queueNameOf(socketFileName: string): string {
  return socketFileName.replace(/\.sock$/, '');
}

/** The Application a request is for (`ARGOCD_APP_NAME`, last one wins as in exec), or ''. */
export function appNameOf(env: readonly EnvEntry[]): string {
  let app = '';
  for (const e of env) if (e.name === 'ARGOCD_APP_NAME') app = e.value;
  return app;
}

/** Keep `[A-Za-z0-9._-]`, percent-encode every other byte; the empty string becomes `~`. */
export function escapeKeyPart(s: string): string {
  if (s === '') return '~';
  let out = '';
  for (const byte of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(byte);
    out += /[A-Za-z0-9._-]/.test(c) ? c : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

function globEscape(s: string): string {
  return s.replace(/[*?[\]\\]/g, c => `\\${c}`);
}
