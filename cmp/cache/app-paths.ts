import { createHash } from 'node:crypto';
import type { EnvEntry } from '../plugin/request.js';
import type { RecordedReads } from '../trace/read-recorder.js';
import { deriveFromShape, tarballRoot, type Derivation } from './generate-paths.js';
import { ByteLru } from './memory-cache.js';
import { shapeIdOf, type Shape } from './read-set.js';

/** Which Application and source a traced generate request is for (from its env). */
export interface AppOrigin {
  /** ARGOCD_APP_NAME (`<namespace>_<name>` outside Argo CD's namespace); '' when absent. */
  app: string;
  plugin: string;
  repoUrl: string;
  sourcePath: string;
  /** Where the tarball root lies in the repository; undefined when the env does not tell. */
  root: string | undefined;
}

/**
 * What the latest traced generate of an Application's source left: the derived annotation
 * value or why there is none. Kept per source (repository URL and path), so that a second
 * source shows up.
 */
export interface AppPathsRecord {
  app: string;
  value?: string;
  reason?: string;
  plugin: string;
  repoUrl: string;
  sourcePath: string;
  /** When the generation it comes from was answered (ms since the epoch). */
  at: number;
  /** When it stops counting (the cache TTL: the shapes behind it are gone then). */
  until: number;
}

/** One Application's current value as shown to users (CLI, HTTP). */
export interface AppPaths {
  app: string;
  value?: string;
  reason?: string;
  derivedAt: string;
  plugin: string;
  repoUrl: string;
  sourcePath: string;
}

/** Where per-app records live: the proxy's memory (standalone) or Redis (distributed). */
export interface AppPathsStore {
  put(record: AppPathsRecord): Promise<void>;
  /**
   * `put` unless the source's record already holds the same outcome and was written less than
   * `refreshMs` ago (most traced requests are hits that derive what is stored already). True
   * when it wrote.
   */
  note(record: AppPathsRecord, refreshMs: number): Promise<boolean>;
  /** The live records of one app, any source. */
  get(app: string): Promise<AppPathsRecord[]>;
  /** The live records of every app, grouped by app. */
  all(): Promise<Map<string, AppPathsRecord[]>>;
}

export function originOf(env: readonly EnvEntry[], appRelPath: string, plugin: string): AppOrigin {
  const last = new Map<string, string>();
  for (const e of env) last.set(e.name, e.value);
  const sourcePath = last.get('ARGOCD_APP_SOURCE_PATH');
  return {
    app: last.get('ARGOCD_APP_NAME') ?? '',
    plugin,
    repoUrl: last.get('ARGOCD_APP_SOURCE_REPO_URL') ?? '',
    sourcePath: sourcePath ?? '',
    root: tarballRoot(sourcePath, appRelPath),
  };
}

/** Why a run left no usable shape. */
export function fallbackReason(reads: RecordedReads | undefined): string {
  if (!reads) return 'the run left no read record';
  return reads.complete ? 'the run renamed a directory it read' : `the read record is incomplete: ${reads.reason}`;
}

/** The record of one answered traced request, or undefined for a request without an app name. */
export function appPathsRecord(o: AppOrigin, outcome: { shape: Shape } | { reason: string }, now: number, ttlMs: number): AppPathsRecord | undefined {
  if (o.app === '') return undefined;
  const derived: Derivation =
    'reason' in outcome
      ? { reason: outcome.reason }
      : o.root === undefined
        ? { reason: 'ARGOCD_APP_SOURCE_PATH does not end with the app path of the request: the repository root is unknown' }
        : derivedOnce(outcome.shape, o.root);
  const { app, plugin, repoUrl, sourcePath } = o;
  return { app, plugin, repoUrl, sourcePath, ...derived, at: now, until: now + ttlMs };
}

/** Bytes of remembered derivations (values are at most GENERATE_PATHS_MAX_CHARS long). */
const DERIVATIONS_BYTES = 4 * 1024 * 1024;
const derivations = new ByteLru<Derivation>(DERIVATIONS_BYTES, Infinity, d => 160 + 2 * ('value' in d ? d.value : d.reason).length);

/**
 * deriveFromShape, remembered by shape id and root: every hit of an app meets the same shape
 * again, and the derivation walks all its paths (in the lookup path, in standalone mode).
 */
function derivedOnce(shape: Shape, root: string): Derivation {
  const key = `${shapeIdOf(shape)}\0${root}`;
  let d = derivations.get(key);
  if (!d) {
    d = deriveFromShape(shape, root);
    derivations.set(key, d);
  }
  return d;
}

/** Why a request answered from the whole-tree entry has no value: no recorded shape has an entry for its tree. */
export const WHOLE_TREE_REASON = 'answered from the whole-tree cache; no recorded read set matches this tree';

/**
 * How long a record holding the same outcome is kept rather than rewritten: half the TTL (it
 * then lives on for at least the other half), at most an hour (its `derivedAt` shows when a
 * generation last confirmed the value).
 */
export function refreshAfter(ttlMs: number): number {
  return Math.min(ttlMs / 2, 3600_000);
}

/** Whether `current` (the source's stored record) already says what `next` would, recently enough. */
export function unchanged(current: AppPathsRecord | undefined, next: AppPathsRecord, refreshMs: number, now: number): boolean {
  if (!current || current.until <= now || now - current.at >= refreshMs) return false;
  return current.value === next.value && current.reason === next.reason && current.plugin === next.plugin && current.app === next.app;
}

/** Remember the outcome of one answered traced request in `store` (nothing without an app name). */
export async function noteAppPaths(store: AppPathsStore, o: AppOrigin, outcome: { shape: Shape } | { reason: string }, ttlMs: number): Promise<void> {
  const record = appPathsRecord(o, outcome, Date.now(), ttlMs);
  if (record) await store.note(record, refreshAfter(ttlMs));
}

/**
 * The field of a record in its app's set: one per source. Not per plugin: the plugin name
 * carries its version, and an upgrade must not look like a second source.
 */
export function sourceIdOf(r: Pick<AppPathsRecord, 'repoUrl' | 'sourcePath'>): string {
  return createHash('sha256').update(JSON.stringify([r.repoUrl, r.sourcePath])).digest('hex').slice(0, 32);
}

/**
 * What users see for one app: the newest record's value, or no value when several sources
 * left records. Argo CD evaluates the annotation against every source of a multi-source
 * app, and each CMP call shows us one source: a value from one source's reads would let a
 * change of the others go unseen.
 */
export function viewOf(records: AppPathsRecord[]): AppPaths | undefined {
  const newest = [...records].sort((a, b) => b.at - a.at)[0];
  if (!newest) return undefined;
  const { app, plugin, repoUrl, sourcePath } = newest;
  const base = { app, derivedAt: new Date(newest.at).toISOString(), plugin, repoUrl, sourcePath };
  if (new Set(records.map(sourceIdOf)).size > 1) {
    return { ...base, reason: 'several sources were generated for this app (a multi-source app, or its source changed within the cache TTL)' };
  }
  return newest.value !== undefined ? { ...base, value: newest.value } : { ...base, reason: newest.reason ?? 'unknown' };
}

/** The answer for an app with no live record. */
export function noAppPaths(app: string): string {
  return `no traced generation of app ${JSON.stringify(app)} within the cache TTL`;
}

/** Every app's view, sorted by app name. */
export async function allAppPaths(store: AppPathsStore): Promise<AppPaths[]> {
  const views = [...(await store.all()).values()].map(viewOf).filter((v): v is AppPaths => v !== undefined);
  return views.sort((a, b) => (a.app < b.app ? -1 : a.app > b.app ? 1 : 0));
}

/** Whether a value from storage has the record's shape (Redis content may be hostile). */
export function isAppPathsRecord(v: unknown): v is AppPathsRecord {
  const r = v as AppPathsRecord;
  return (
    typeof r === 'object' &&
    r !== null &&
    ['app', 'plugin', 'repoUrl', 'sourcePath'].every(k => typeof (r as unknown as Record<string, unknown>)[k] === 'string') &&
    typeof r.at === 'number' &&
    typeof r.until === 'number' &&
    (typeof r.value === 'string' || typeof r.reason === 'string')
  );
}

/** Bytes the standalone store may hold; past them the least recently generated apps go. */
const MEMORY_BYTES = 16 * 1024 * 1024;

/** Standalone mode: the records in the proxy's memory, with the cache TTL. */
export class MemoryAppPaths implements AppPathsStore {
  private readonly lru: ByteLru<AppPathsRecord[]>;

  constructor(ttlMs: number, private readonly now: () => number = Date.now) {
    this.lru = new ByteLru(MEMORY_BYTES, ttlMs, rs => rs.reduce((n, r) => n + 256 + 2 * ((r.value ?? r.reason ?? '').length + r.repoUrl.length + r.sourcePath.length), 0), now);
  }

  async put(record: AppPathsRecord): Promise<void> {
    const id = sourceIdOf(record);
    const others = (await this.get(record.app)).filter(r => sourceIdOf(r) !== id);
    this.lru.set(record.app, [record, ...others]);
  }

  async note(record: AppPathsRecord, refreshMs: number): Promise<boolean> {
    const id = sourceIdOf(record);
    // peek: a request that changes nothing does not make its app recently used.
    const current = (this.lru.peek(record.app) ?? []).find(r => sourceIdOf(r) === id);
    if (unchanged(current, record, refreshMs, this.now())) return false;
    await this.put(record);
    return true;
  }

  async get(app: string): Promise<AppPathsRecord[]> {
    const now = this.now();
    return (this.lru.get(app) ?? []).filter(r => r.until > now);
  }

  async all(): Promise<Map<string, AppPathsRecord[]>> {
    const now = this.now();
    const out = new Map<string, AppPathsRecord[]>();
    for (const [app, records] of this.lru.live()) {
      const live = records.filter(r => r.until > now);
      if (live.length > 0) out.set(app, live);
    }
    return out;
  }
}
