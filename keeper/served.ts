import type { AppPaths } from '../cmp/cache/app-paths.js';
import { GENERATE_PATHS_ANNOTATION } from '../cmp/cache/generate-paths.js';

/** The parts of an Application the keeper reads (Kubernetes content: checked, not trusted). */
export interface Application {
  metadata?: { annotations?: Record<string, unknown> };
  spec?: {
    source?: { repoURL?: unknown; path?: unknown; plugin?: { name?: unknown } };
    sources?: unknown;
  };
}

/** The manifest-generate-paths annotation of an Application, undefined when absent. */
export function annotationOf(app: Application): string | undefined {
  const v = app.metadata?.annotations?.[GENERATE_PATHS_ANNOTATION];
  return typeof v === 'string' ? v : undefined;
}

/**
 * Why the keeper must leave an Application alone, or undefined when the view is about it: a
 * single source that names the plugin, repository and path the view was derived from. A
 * multi-source app is never ours to annotate (Argo CD matches the value against every source);
 * an app that finds its plugin by discovery names none, and is left alone too.
 */
export function whyNotServed(app: Application, view: Pick<AppPaths, 'plugin' | 'repoUrl' | 'sourcePath'>): string | undefined {
  const spec = app.spec;
  const sources = spec?.sources;
  if (Array.isArray(sources) && sources.length > 0) return 'a multi-source Application';
  const source = spec?.source;
  if (!source) return 'the Application has no source';
  const plugin = source.plugin?.name;
  if (typeof plugin !== 'string' || plugin === '') return 'its source names no plugin (plugin discovery, or another tool)';
  if (plugin !== view.plugin) return `its source names plugin ${JSON.stringify(plugin)}, not ${JSON.stringify(view.plugin)}`;
  if (cleanPath(source.path) !== cleanPath(view.sourcePath)) return `its source path ${JSON.stringify(source.path)} is not the generated one ${JSON.stringify(view.sourcePath)}`;
  if (view.repoUrl !== '' && cleanRepo(source.repoURL) !== cleanRepo(view.repoUrl)) return `its repository ${JSON.stringify(source.repoURL)} is not the generated one`;
  return undefined;
}

function cleanPath(p: unknown): string {
  const s = typeof p === 'string' ? p : '';
  const c = s.replace(/^\.?\/+/, '').replace(/\/+$/, '');
  return c === '.' ? '' : c;
}

/** Argo CD's repository URLs compare without case, a trailing `/` or `.git`. */
function cleanRepo(u: unknown): string {
  return (typeof u === 'string' ? u : '').toLowerCase().replace(/\/+$/, '').replace(/\.git$/, '');
}
