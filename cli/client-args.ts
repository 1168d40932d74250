import { parseArgs } from 'node:util';
import type { EnvEntry } from '../proto/generated/cmpserver/plugin/plugin.js';
import { parseGoDuration } from '../cmp/go/go-duration.js';
import type { PluginParameter } from './repo-server-env.js';

export type ClientKind = 'generate' | 'match' | 'params';

/** A command line the client cannot act on; the CLI prints it with the usage and exits 2. */
export class UsageError extends Error {}

export const CLIENT_USAGE = `usage: cmp-offload generate|match|params DIR [flags] (--socket PATH | --local [--config-dir-path D])

Packs DIR like argocd-repo-server (DIR = repository root) and calls the plugin.

  --socket PATH             plugin socket to call
  --local                   run the plugin in-process instead (plugin.yaml from --config-dir-path)
  --config-dir-path D       with --local (default /home/argocd/cmp-server/config)
  --app-path P              app directory relative to DIR (default: DIR itself)
  --tar-exclude GLOB        like the repo-server's --plugin-tar-exclude (repeatable)
  --env NAME=VALUE          raw env entry appended to what the repo-server sends (repeatable)
  --app-name N              Application name (default: the app directory's name)
  --app-namespace NS        Application namespace (outside "argocd" the name becomes NS_N)
  --namespace NS            destination namespace
  --project P               project name
  --revision R              resolved revision (commit SHA)
  --target-revision T       spec.source.targetRevision
  --repo-url U              repository URL
  --kube-version V          destination cluster version, e.g. v1.30.1
  --api-versions a,b        destination API versions
  --plugin-env NAME=VALUE   spec.source.plugin.env entry (repeatable)
  --param name=value        string parameter; name[]=item appends to an array, name[key]=value sets a map entry
  --params-json JSON        spec.source.plugin.parameters as JSON
  --no-plugin-block         the Application has no spec.source.plugin block
  --output yaml|json        generate: manifests as a YAML stream (default) or a JSON array
  --timeout D               call deadline as a Go duration (default 60s; 0 = none)
`;

export interface ClientArgs {
  kind: ClientKind;
  dir: string;
  appPath: string;
  tarExclusions: string[];
  extraEnv: string[];
  appName: string | undefined;
  appNamespace: string | undefined;
  destNamespace: string;
  project: string;
  revision: string;
  targetRevision: string;
  repoUrl: string;
  kubeVersion: string;
  apiVersions: string[];
  hasPluginBlock: boolean;
  pluginEnv: EnvEntry[];
  parameters: PluginParameter[] | null;
  target: { socket: string } | { local: true; configDirPath: string };
  output: 'yaml' | 'json';
  /** 0 = no deadline. */
  timeoutMs: number;
}

const DEFAULT_CONFIG_DIR = '/home/argocd/cmp-server/config';

/** Parse and validate the client's command line; throws UsageError on anything it cannot use. */
export function parseClientArgs(kind: ClientKind, argv: string[]): ClientArgs {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        'app-path': { type: 'string' },
        env: { type: 'string', multiple: true },
        'tar-exclude': { type: 'string', multiple: true },
        'app-name': { type: 'string' },
        'app-namespace': { type: 'string' },
        namespace: { type: 'string' },
        project: { type: 'string' },
        revision: { type: 'string' },
        'target-revision': { type: 'string' },
        'repo-url': { type: 'string' },
        'kube-version': { type: 'string' },
        'api-versions': { type: 'string' },
        'plugin-env': { type: 'string', multiple: true },
        param: { type: 'string', multiple: true },
        'params-json': { type: 'string' },
        'no-plugin-block': { type: 'boolean' },
        socket: { type: 'string' },
        local: { type: 'boolean' },
        'config-dir-path': { type: 'string' },
        output: { type: 'string' },
        timeout: { type: 'string' },
      },
    });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const { values: v, positionals } = parsed;
  if (positionals.length !== 1) throw new UsageError(`expected exactly one DIR, got ${positionals.length}`);

  if ((v.socket === undefined) === !v.local) throw new UsageError('give exactly one of --socket PATH and --local');
  if (v.socket === '') throw new UsageError('--socket needs a path');
  if (v['config-dir-path'] !== undefined && !v.local) throw new UsageError('--config-dir-path only applies with --local');
  const output = v.output ?? 'yaml';
  if (output !== 'yaml' && output !== 'json') throw new UsageError(`--output must be yaml or json, got ${JSON.stringify(output)}`);

  const fromJson = v['params-json'] === undefined ? null : paramsFromJson(v['params-json']);
  const fromFlags = paramsFromFlags(v.param ?? []);
  return {
    kind,
    dir: positionals[0]!,
    appPath: v['app-path'] ?? '.',
    tarExclusions: v['tar-exclude'] ?? [],
    extraEnv: (v.env ?? []).map((e) => (splitPair('--env', e), e)),
    appName: v['app-name'],
    appNamespace: v['app-namespace'],
    destNamespace: v.namespace ?? '',
    project: v.project ?? '',
    revision: v.revision ?? '',
    targetRevision: v['target-revision'] ?? '',
    repoUrl: v['repo-url'] ?? '',
    kubeVersion: v['kube-version'] ?? '',
    apiVersions: v['api-versions'] ? v['api-versions'].split(',') : [],
    hasPluginBlock: !v['no-plugin-block'],
    pluginEnv: (v['plugin-env'] ?? []).map((e) => {
      const [name, value] = splitPair('--plugin-env', e);
      return { name, value };
    }),
    parameters: fromJson === null && fromFlags.length === 0 ? null : [...(fromJson ?? []), ...fromFlags],
    target: v.local ? { local: true, configDirPath: v['config-dir-path'] ?? DEFAULT_CONFIG_DIR } : { socket: v.socket! },
    output,
    timeoutMs: timeout(v.timeout ?? '60s'),
  };
}

function splitPair(flag: string, s: string): [string, string] {
  const eq = s.indexOf('=');
  if (eq <= 0) throw new UsageError(`${flag} expects NAME=VALUE, got ${JSON.stringify(s)}`);
  return [s.slice(0, eq), s.slice(eq + 1)];
}

function timeout(raw: string): number {
  let ms: number;
  try {
    ms = parseGoDuration(raw);
  } catch (err) {
    throw new UsageError(`--timeout: ${(err as Error).message}`);
  }
  if (ms < 0) throw new UsageError(`--timeout must not be negative, got ${JSON.stringify(raw)}`);
  return ms;
}

/** `name=value` (string), `name[]=item` (array item), `name[key]=value` (map entry); grouped by name in first-seen order. */
function paramsFromFlags(flags: string[]): PluginParameter[] {
  const byName = new Map<string, PluginParameter>();
  for (const flag of flags) {
    const entry = /^([^=[]*)\[([^\]]*)\]=(.*)$/s.exec(flag);
    const [name, value] = entry ? [entry[1]!, entry[3]!] : splitPair('--param', flag);
    let p = byName.get(name);
    if (!p) byName.set(name, (p = { name }));
    if (!entry) {
      if (p.string !== undefined) throw new UsageError(`--param ${name} given twice`);
      p.string = value;
    } else if (entry[2] === '') {
      (p.array ??= []).push(value);
    } else {
      p.map ??= Object.create(null) as Record<string, string>;
      p.map[entry[2]!] = value;
    }
  }
  return [...byName.values()];
}

/** Argo's `plugin.parameters` JSON: null or a list of {name, string?, map?, array?}; null fields are absent. */
function paramsFromJson(text: string): PluginParameter[] | null {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (err) {
    throw new UsageError(`--params-json: ${(err as Error).message}`);
  }
  if (data === null) return null;
  if (!Array.isArray(data)) throw new UsageError('--params-json must be a JSON array');
  return data.map((item: unknown, i) => {
    const bad = (what: string) => new UsageError(`--params-json[${i}]: ${what}`);
    if (typeof item !== 'object' || item === null || Array.isArray(item)) throw bad('must be an object');
    const o = item as Record<string, unknown>;
    for (const k of Object.keys(o)) if (!['name', 'string', 'map', 'array'].includes(k)) throw bad(`unknown field ${JSON.stringify(k)}`);
    const p: PluginParameter = { name: '' };
    if (o.name != null) {
      if (typeof o.name !== 'string') throw bad('name must be a string');
      p.name = o.name;
    }
    if (o.string != null) {
      if (typeof o.string !== 'string') throw bad('string must be a string');
      p.string = o.string;
    }
    if (o.map != null) {
      if (typeof o.map !== 'object' || o.map === null || Array.isArray(o.map)) throw bad('map must be an object');
      const map = Object.create(null) as Record<string, string>;
      for (const [k, val] of Object.entries(o.map)) {
        if (typeof val !== 'string') throw bad(`map.${k} must be a string`);
        map[k] = val;
      }
      p.map = map;
    }
    if (o.array != null) {
      if (!Array.isArray(o.array) || o.array.some((x) => typeof x !== 'string')) throw bad('array must be a list of strings');
      p.array = o.array as string[];
    }
    return p;
  });
}
