import path from 'node:path';
import type { Ctx } from '../../cmp/context.js';
import { noteAppPaths, originOf } from '../../cmp/cache/app-paths.js';
import { cacheKey } from '../../cmp/cache/cache-key.js';
import { revisionValues, tracedBaseKey, type TracedRequest } from '../../cmp/cache/traced-key.js';
import type { Logger } from '../../cmp/log.js';
import type { Engine } from '../../cmp/plugin/execute.js';
import { discoverByPattern } from '../../cmp/plugin/discover.js';
import type { PluginRequest, PluginResult, RpcKind } from '../../cmp/plugin/request.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { IngestedRepo } from '../ingest/receive-repo-stream.js';

export interface AnswerDeps {
  engine: Engine;
  /** Plugin name as Applications see it (socket name without `.sock`). */
  pluginName: string;
  specDigest: string;
  dispatcher: Dispatcher;
  /** Where the request's lines go (none in tests that build the server bare). */
  log?: Logger;
}

/**
 * After ingest: answer MatchRepository's pattern rules from the tree index when the tree is
 * plain enough to need no extraction, otherwise compute the cache key and dispatch.
 * `requestDir` is the request's own work dir: index-answered patterns are rooted there, so
 * error texts name the same absolute paths an extraction would.
 */
export async function answerRequest(
  deps: AnswerDeps,
  kind: RpcKind,
  repo: IngestedRepo,
  requestDir: string,
  ctx: Ctx,
): Promise<PluginResult> {
  const req: PluginRequest = { kind, appRelPath: repo.metadata.appRelPath, env: repo.metadata.env };
  const { discover } = deps.engine.config.spec;
  if (kind === 'match' && repo.index?.simple && (discover.fileName !== '' || discover.find.glob !== '')) {
    // Without symlinks, securejoin reduces to a join with `..` clamped at the root.
    const appPath = path.join(requestDir, path.posix.normalize(`/${req.appRelPath}`));
    const isSupported = await discoverByPattern(discover, appPath, repo.index.globFs(requestDir));
    return { kind, isSupported, isDiscoveryEnabled: true };
  }
  const { cache } = deps.engine.options;
  const key =
    cache.enabled && repo.index && !bypassesCache(req.env, cache.bypassEnv)
      ? cacheKey({
          plugin: deps.pluginName,
          specDigest: deps.specDigest,
          salt: cache.salt,
          kind,
          appRelPath: req.appRelPath,
          env: req.env,
          ignoreEnv: cache.ignoreEnv,
          contentDigest: repo.index.contentDigest(deps.engine.config.spec.preserveFileMode),
        })
      : undefined;
  // Duplicate entries, conflicts or symlinks that are not plain leaves make the index differ
  // from the extracted tree: whole-tree key only.
  const traced: TracedRequest | undefined =
    key !== undefined && cache.traced && kind === 'generate' && repo.index?.traceable
      ? {
          baseKey: tracedBaseKey({
            plugin: deps.pluginName,
            specDigest: deps.specDigest,
            salt: cache.salt,
            kind,
            appRelPath: req.appRelPath,
            env: req.env,
            ignoreEnv: cache.ignoreEnv,
          }),
          revision: revisionValues(req.env),
          index: repo.index,
          preserveFileMode: deps.engine.config.spec.preserveFileMode,
          rule: cache.revision,
          origin: originOf(req.env, req.appRelPath, deps.pluginName),
        }
      : undefined;
  if (cache.traced && kind === 'generate' && !traced) {
    // This generation is not traced: a value derived from an earlier one may miss what it reads.
    const reason = key === undefined ? 'the latest generation was not cached (cache bypass or no tree index)' : 'the latest tree has duplicate entries, path conflicts or symlinks that are not plain leaves: not traced';
    const origin = originOf(req.env, req.appRelPath, deps.pluginName);
    // Not recorded, the app keeps a value derived from an earlier traced generation, which may
    // miss what this one reads: say so (the answer itself does not depend on it).
    void noteAppPaths(deps.dispatcher.paths, origin, { reason }, cache.ttlMs).catch(err =>
      deps.log?.warn({ app: origin.app, err: (err as Error).message }, 'manifest-generate-paths not updated for an untraced generation'),
    );
  }
  return deps.dispatcher.dispatch(req, repo, key, ctx, traced);
}

/**
 * Whether the Application opted out of the cache: its plugin env sets the entry named by
 * CMP_OFFLOAD_CACHE_BYPASS_ENV to `off` (any case), i.e. the request env holds
 * `ARGOCD_ENV_CMP_OFFLOAD_CACHE=off` by default. Argo's Hard Refresh never reaches a CMP, so this
 * is the per-app way to get a fresh run: no key means no lookup, no store and no coalescing, in
 * both modes (the worker stores only under the key the proxy sends). The last entry of the name
 * wins, as in the command's env.
 */
export function bypassesCache(env: readonly { name: string; value: string }[], bypassEnv: string): boolean {
  let value: string | undefined;
  for (const e of env) {
    const rendered = `${e.name}=${e.value}`;
    const eq = rendered.indexOf('=');
    if (rendered.slice(0, eq) === bypassEnv) value = rendered.slice(eq + 1);
  }
  return value !== undefined && value.toLowerCase() === 'off';
}
