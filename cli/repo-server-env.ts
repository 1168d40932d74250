import type { EnvEntry } from '../proto/generated/cmpserver/plugin/plugin.js';
import { goExpand } from '../cmp/go/go-expand.js';
import { goJsonString, goJsonStringArray, goJsonStringMap } from '../cmp/go/go-json.js';

/** One entry of an Application's `spec.source.plugin.parameters` (Argo's ApplicationSourcePluginParameter). */
export interface PluginParameter {
  name: string;
  string?: string;
  map?: Record<string, string>;
  array?: string[];
}

/**
 * Which repo-server call the env is for (docs/argo-contract.md#what-the-repo-server-sends):
 * `manifest` — GenerateManifest and MatchRepository during plugin selection (getPluginEnvs);
 * `detection` — source-type detection probes (the nine ARGOCD_APP_* only);
 * `parameters` — GetAppDetails / GetParametersAnnouncement (four ARGOCD_APP_*, then the plugin block).
 */
export type EnvVariant = 'manifest' | 'detection' | 'parameters';

export interface RepoServerEnvOptions {
  variant?: EnvVariant;
  /** The Application's name. */
  appName: string;
  /** The Application's own namespace; apps outside the control-plane namespace are named `<ns>_<name>`. */
  appNamespace?: string;
  /** Argo CD's namespace (default `argocd`). */
  controlPlaneNamespace?: string;
  project?: string;
  /** Resolved revision (commit SHA). */
  revision?: string;
  repoUrl?: string;
  sourcePath?: string;
  targetRevision?: string;
  /** Destination namespace: ARGOCD_APP_NAMESPACE. */
  destNamespace?: string;
  /** Destination cluster version as reported, e.g. `v1.30.1+k3s1`. */
  kubeVersion?: string;
  apiVersions?: string[];
  /** Whether the Application source has a `plugin` block; without it no ARGOCD_ENV_* / parameters are sent. */
  hasPluginBlock?: boolean;
  pluginEnv?: EnvEntry[];
  /** `null`/undefined = no parameters (sent as `null`). */
  parameters?: PluginParameter[] | null;
  /** Raw `NAME=VALUE` entries appended last. */
  extraEnv?: string[];
}

/**
 * The env list the repo-server sends in the stream metadata, in its exact order: Go builds
 * `NAME=VALUE` strings and SendRepoStream splits them at the first `=` (so a plugin env name
 * containing `=` moves the rest into the value), dropping strings without `=`.
 */
export function buildRepoServerEnv(o: RepoServerEnvOptions): EnvEntry[] {
  return splitEnvStrings(repoServerEnvStrings(o));
}

/** The same list before splitting: Go's `[]string` of `NAME=VALUE`. */
export function repoServerEnvStrings(o: RepoServerEnvOptions): string[] {
  const variant = o.variant ?? 'manifest';
  const revision = o.revision ?? '';
  const app: Record<string, string> = {
    ARGOCD_APP_NAME: instanceName(o.appName, o.appNamespace, o.controlPlaneNamespace ?? 'argocd'),
    ARGOCD_APP_NAMESPACE: o.destNamespace ?? '',
    ARGOCD_APP_PROJECT_NAME: o.project ?? '',
    ARGOCD_APP_REVISION: revision,
    ARGOCD_APP_REVISION_SHORT: shortenRevision(revision, 7),
    ARGOCD_APP_REVISION_SHORT_8: shortenRevision(revision, 8),
    ARGOCD_APP_SOURCE_REPO_URL: o.repoUrl ?? '',
    ARGOCD_APP_SOURCE_PATH: o.sourcePath ?? '',
    ARGOCD_APP_SOURCE_TARGET_REVISION: o.targetRevision ?? '',
  };
  const names =
    variant === 'parameters'
      ? ['ARGOCD_APP_NAME', 'ARGOCD_APP_SOURCE_REPO_URL', 'ARGOCD_APP_SOURCE_PATH', 'ARGOCD_APP_SOURCE_TARGET_REVISION']
      : Object.keys(app);
  const base = names.map((n) => `${n}=${app[n]}`);
  if (variant === 'manifest') {
    base.push(`KUBE_VERSION=${kubeVersionForPlugins(o.kubeVersion ?? '')}`);
    base.push(`KUBE_API_VERSIONS=${(o.apiVersions ?? []).join(',')}`);
  }
  const env = variant === 'detection' ? base : [...base, ...pluginBlockEnv(base, o)];
  return [...env, ...(o.extraEnv ?? [])];
}

/** getPluginParamEnvs: ARGOCD_ENV_* (substituted from `base`), ARGOCD_APP_PARAMETERS, PARAM_*. */
function pluginBlockEnv(base: string[], o: RepoServerEnvOptions): string[] {
  if (!o.hasPluginBlock) return [];
  const vars = new Map<string, string>();
  for (const e of splitEnvStrings(base)) vars.set(e.name, e.value);
  const expand = (v: string) => goExpand(v, (name) => (name === '$' ? '$' : (vars.get(name) ?? '')));
  const out = (o.pluginEnv ?? []).map((e) => `ARGOCD_ENV_${e.name}=${expand(e.value)}`);
  return [...out, ...parametersEnv(o.parameters ?? null)];
}

/** ApplicationSourcePluginParameters.Environ(): the JSON of all parameters, then PARAM_* per parameter. */
export function parametersEnv(parameters: PluginParameter[] | null): string[] {
  const env = [`ARGOCD_APP_PARAMETERS=${parametersJson(parameters)}`];
  for (const p of parameters ?? []) {
    const baseName = `PARAM_${escapeParamName(p.name)}`;
    if (p.string !== undefined) env.push(`${baseName}=${p.string}`);
    // Go iterates the map in random order; ours is insertion order.
    for (const [k, v] of Object.entries(p.map ?? {})) env.push(`${baseName}_${escapeParamName(k)}=${v}`);
    (p.array ?? []).forEach((v, i) => env.push(`${baseName}_${i}=${v}`));
  }
  return env;
}

/**
 * json.Marshal of the parameter list: `null` for none; each object with sorted keys
 * `array, map, name, string`, `name` always present, `map`/`array` as `{}`/`[]` when set but empty.
 */
export function parametersJson(parameters: PluginParameter[] | null): string {
  if (parameters === null) return 'null';
  const objects = parameters.map((p) => {
    const fields: string[] = [];
    if (p.array !== undefined) fields.push(`"array":${goJsonStringArray(p.array)}`);
    if (p.map !== undefined) fields.push(`"map":${goJsonStringMap(p.map)}`);
    fields.push(`"name":${goJsonString(p.name)}`);
    if (p.string !== undefined) fields.push(`"string":${goJsonString(p.string)}`);
    return `{${fields.join(',')}}`;
  });
  return `[${objects.join(',')}]`;
}

/**
 * Argo's `escaped`: strings.ToUpper, then every rune outside [A-Z0-9_] becomes `_`. Go upper-cases
 * rune by rune (simple case mapping), so a rune JS would expand (ß ⇒ SS) stays one rune, i.e. `_`.
 */
export function escapeParamName(name: string): string {
  let out = '';
  for (const ch of name) {
    const up = ch.toUpperCase();
    out += /^[A-Z0-9_]$/.test(up) ? up : '_';
  }
  return out;
}

/** Go's `NAME=VALUE` strings split at the first `=`; strings without `=` are dropped. */
export function splitEnvStrings(env: readonly string[]): EnvEntry[] {
  const out: EnvEntry[] = [];
  for (const s of env) {
    const eq = s.indexOf('=');
    if (eq >= 0) out.push({ name: s.slice(0, eq), value: s.slice(eq + 1) });
  }
  return out;
}

/** Application.InstanceName: plain name inside the control-plane namespace, else `<ns>_<name>`. */
function instanceName(name: string, namespace: string | undefined, controlPlane: string): string {
  return namespace === undefined || namespace === '' || namespace === controlPlane ? name : `${namespace}_${name}`;
}

/** Go's `revision[:n]` when longer: a byte slice of the UTF-8 text. */
function shortenRevision(revision: string, n: number): string {
  const bytes = Buffer.from(revision);
  return bytes.length > n ? bytes.subarray(0, n).toString() : revision;
}

// RE2's `.` excludes only \n, unlike JS's `.`; hence [^\n].
const GENERIC_VERSION = /^[\t\n\f\r ]*v?([0-9]+(?:\.[0-9]+)*)[^\n]*$/;

/**
 * KUBE_VERSION: the cluster version parsed like k8s.io/apimachinery's version.ParseGeneric and
 * printed as its dotted numbers (`v1.30.1+k3s1` ⇒ `1.30.1`); empty stays empty. Throws with
 * apimachinery's wording on versions it rejects.
 */
export function kubeVersionForPlugins(version: string): string {
  if (version === '') return '';
  const m = GENERIC_VERSION.exec(version);
  if (!m) throw new Error(`could not parse ${goQuote(version)} as version`);
  const components = m[1]!.split('.');
  if (components.length < 2) throw new Error(`illegal version string ${goQuote(version)}`);
  return components
    .map((c, i) => {
      if (i === 0 && c.startsWith('0') && c !== '0') {
        throw new Error(`illegal zero-prefixed version component ${goQuote(c)} in ${goQuote(version)}`);
      }
      const n = BigInt(c);
      if (n > 0xffff_ffff_ffff_ffffn) {
        throw new Error(
          `illegal non-numeric version component ${goQuote(c)} in ${goQuote(version)}: strconv.ParseUint: parsing ${goQuote(c)}: value out of range`,
        );
      }
      return n.toString();
    })
    .join('.');
}

/** Enough of Go's %q for version strings in error messages. */
function goQuote(s: string): string {
  return JSON.stringify(s);
}
