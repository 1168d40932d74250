import { createHash } from 'node:crypto';
import type { RevisionRule } from '../config/options.js';
import { metrics } from '../observe/metrics.js';
import type { EnvEntry, PluginResult } from '../plugin/request.js';
import type { TreeIndex } from '../tar/tree-index.js';
import type { AppOrigin } from './app-paths.js';
import { cacheKey, type CacheKeyInput } from './cache-key.js';
import { preparedOf, someManifestIncludes } from '../split/prepared.js';
import type { RecordedReads } from '../trace/read-recorder.js';
import { shapeId, shapeOf, stateDigest, type Shape } from './read-set.js';

export type { RevisionRule };

/** The build env that changes with every commit (docs/argo-contract.md#what-the-repo-server-sends). */
export const REVISION_ENV = ['ARGOCD_APP_REVISION', 'ARGOCD_APP_REVISION_SHORT', 'ARGOCD_APP_REVISION_SHORT_8'] as const;


/** What the proxy knows about a generate request when the traced cache may answer it. */
export interface TracedRequest {
  /** Plugin, spec digest, salt, kind, app path and env minus the revision variables. */
  baseKey: string;
  /** Values of the revision variables in the request (last one of each name wins), non-empty only. */
  revision: string[];
  index: TreeIndex;
  preserveFileMode: boolean;
  rule: RevisionRule;
  /** The Application and source it is for: where its manifest-generate-paths value goes. */
  origin: AppOrigin;
}

/** The key every traced entry of one request family shares: the content cache key without tree and revision. */
export function tracedBaseKey(input: Omit<CacheKeyInput, 'contentDigest'>): string {
  const ignoreEnv = new Set([...input.ignoreEnv, ...REVISION_ENV]);
  return cacheKey({ ...input, ignoreEnv, contentDigest: 'traced/v1' });
}

/** The values of the revision variables in a request env. */
export function revisionValues(env: readonly EnvEntry[]): string[] {
  const last = new Map<string, string>();
  for (const e of env) if ((REVISION_ENV as readonly string[]).includes(e.name)) last.set(e.name, e.value);
  return REVISION_ENV.map(n => last.get(n) ?? '');
}

/** Whether a fresh result must be bound to the request's revision (see RevisionRule). */
export function boundToRevision(result: PluginResult, t: TracedRequest): boolean {
  if (t.rule === 'always') return true;
  if (result.kind !== 'generate') return true;
  const values = t.revision.filter(v => v !== '');
  if (values.length === 0) return false;
  // A prepared result is searched in its encoding: its manifests are not strings here.
  const prepared = preparedOf(result);
  if (prepared) return values.some(v => someManifestIncludes(prepared.encoded, v));
  return result.manifests.some(m => values.some(v => m.includes(v)));
}

/** The cache key of the result whose run had `shape`, for the tree and revision of `t`. */
export function tracedEntryKey(t: TracedRequest, shape: Shape): string {
  const parts = [
    'cmp-offload/traced-entry/v1',
    t.baseKey,
    shapeId(shape),
    stateDigest(t.index, shape, t.preserveFileMode),
    shape.revision ? t.revision : null,
  ];
  return createHash('sha256').update(JSON.stringify(parts)).digest('hex');
}

/**
 * After a fresh run: the traced entry to store its result under, or undefined when the record
 * is incomplete (tracer missing, limits, unattributable paths, a renamed directory): then
 * only the whole-tree key holds the result. Counts the run as a miss or a fallback.
 */
export function entryForRun(t: TracedRequest, reads: RecordedReads | undefined, result: PluginResult): { key: string; shape: Shape } | undefined {
  const shape = reads?.complete ? shapeOf(reads, t.index, boundToRevision(result, t)) : undefined;
  if (!shape) {
    metrics.tracedCache.inc({ result: 'fallback' });
    return undefined;
  }
  metrics.tracedCache.inc({ result: 'miss' });
  return { key: tracedEntryKey(t, shape), shape };
}
