import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { ParameterAnnouncement } from '../../proto/generated/reposerver/repository/repository.js';
import { CmpError } from '../errors.js';
import { yamlToJson } from '../go/yaml-to-json.js';
import {
  embedded,
  field,
  goBool,
  goInt64,
  goJsonUnmarshal,
  goMap,
  goNamedString,
  goPtr,
  goSlice,
  goString,
  goStruct,
} from '../go/go-json-decode.js';

/** `plugin.Command`: argv = command[0], command[1:], args. */
export interface Command {
  command: string[];
  args: string[];
}

/** The part of Kubernetes ObjectMeta that is decoded (and so type-checked); int64s are decimal strings. */
export interface ObjectMeta {
  name: string;
  generateName: string;
  namespace: string;
  selfLink: string;
  uid: string;
  resourceVersion: string;
  generation: string;
  deletionGracePeriodSeconds: string | null;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  finalizers: string[];
}

/** A decoded plugin.yaml (Argo's `plugin.PluginConfig`), every field present with Go's zero values. */
export interface PluginConfig {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  spec: {
    version: string;
    init: Command;
    generate: Command;
    discover: { fileName: string; find: Command & { glob: string } };
    /** `static` may hold nulls (`- ~`): Argo keeps the nil pointer and panics when it sends it. */
    parameters: { static: Array<ParameterAnnouncement | null>; dynamic: Command };
    preserveFileMode: boolean;
    provideGitCreds: boolean;
  };
}

// Argo's Go types, field for field: their names and json tags are what error texts quote.

/** `apiclient.ParameterAnnouncement` (gogo-generated, json tags = proto names). */
export const parameterAnnouncementType = goStruct('apiclient.ParameterAnnouncement', [
  field('name', goString),
  field('title', goString),
  field('tooltip', goString),
  field('required', goBool),
  field('itemType', goString),
  field('collectionType', goString),
  field('string', goString),
  field('array', goSlice(goString)),
  field('map', goMap(goString)),
]);

const commandType = goStruct('plugin.Command', [field('command', goSlice(goString)), field('args', goSlice(goString))]);

const pluginConfigType = goStruct('plugin.PluginConfig', [
  ...embedded('TypeMeta', goStruct('v1.TypeMeta', [field('kind', goString), field('apiVersion', goString)])),
  field(
    'metadata',
    goStruct('v1.ObjectMeta', [
      field('name', goString),
      field('generateName', goString),
      field('namespace', goString),
      field('selfLink', goString),
      field('uid', goNamedString('types.UID')),
      field('resourceVersion', goString),
      field('generation', goInt64),
      field('deletionGracePeriodSeconds', goPtr(goInt64)),
      field('labels', goMap(goString)),
      field('annotations', goMap(goString)),
      field('finalizers', goSlice(goString)),
    ]),
  ),
  field(
    'spec',
    goStruct('plugin.PluginConfigSpec', [
      field('version', goString),
      field('init', commandType),
      field('generate', commandType),
      field(
        'discover',
        goStruct('plugin.Discover', [
          field('find', goStruct('plugin.Find', [...embedded('Command', commandType), field('glob', goString)])),
          field('fileName', goString),
        ]),
      ),
      // Argo tags Parameters (and its fields) for yaml only, so encoding/json matches the Go field
      // names case-insensitively, and error paths read `spec.Parameters.Static...`.
      field(
        'Parameters',
        goStruct('plugin.Parameters', [
          field('Static', goSlice(goPtr(parameterAnnouncementType)), 'static'),
          field('Dynamic', commandType, 'dynamic'),
        ]),
        'parameters',
      ),
      field('preserveFileMode', goBool),
      field('provideGitCreds', goBool),
    ]),
  ),
]);

const KIND = 'ConfigManagementPlugin';

/**
 * Parse plugin.yaml as Argo does: sigs.k8s.io/yaml YAMLToJSON (first document, YAML 1.1 typing),
 * then Go encoding/json into PluginConfig. Throws with Go's texts; does not validate.
 */
export function parsePluginConfig(src: string | Buffer): PluginConfig {
  return goJsonUnmarshal<PluginConfig>(yamlToJson(src), pluginConfigType);
}

/** Argo's ValidatePluginConfig: the three checks of docs/argo-contract.md#pluginyaml, in order, with their texts. */
export function validatePluginConfig(c: PluginConfig): void {
  if (c.metadata.name === '') {
    throw new CmpError('invalid plugin configuration file. metadata.name should be non-empty');
  }
  if (c.kind !== KIND) {
    throw new CmpError(`invalid plugin configuration file. kind should be ${KIND}, found ${c.kind}`);
  }
  if (c.spec.generate.command.length === 0) {
    throw new CmpError('invalid plugin configuration file. spec.generate command should be non-empty');
  }
}

/** The plugin.yaml path for a `--config-dir-path` value (Go: TrimRight(dir, "/") + "/plugin.yaml"). */
export function pluginConfigPath(configDirPath: string): string {
  return `${configDirPath.replace(/\/+$/, '')}/plugin.yaml`;
}

/** Read, parse and validate `<dir>/plugin.yaml`; file errors read like Go's os.ReadFile ones. */
export async function readPluginConfig(configDirPath: string): Promise<PluginConfig> {
  const path = pluginConfigPath(configDirPath);
  let data: Buffer;
  try {
    data = await readFile(path);
  } catch (err) {
    throw new CmpError(goFileErrorText(path, err));
  }
  const config = parsePluginConfig(data);
  validatePluginConfig(config);
  return config;
}

// strerror texts Go prints for the errno values a config read can plausibly hit.
const ERRNO_TEXT: Record<string, string> = {
  ENOENT: 'no such file or directory',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  ENOTDIR: 'not a directory',
  ELOOP: 'too many levels of symbolic links',
  ENAMETOOLONG: 'file name too long',
  EISDIR: 'is a directory',
  EMFILE: 'too many open files',
  EIO: 'input/output error',
};

function goFileErrorText(path: string, err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code ?? '';
  // Go opens a directory fine and fails on the read.
  const op = code === 'EISDIR' ? 'read' : 'open';
  const text = ERRNO_TEXT[code] ?? (err instanceof Error ? err.message : String(err));
  return `${op} ${path}: ${text}`;
}

/** The socket file name: `<name>-<version>.sock`, or `<name>.sock` without a version (no sanitising). */
export function socketFileName(c: PluginConfig): string {
  return c.spec.version !== '' ? `${c.metadata.name}-${c.spec.version}.sock` : `${c.metadata.name}.sock`;
}

/** The plugin name Applications use (`spec.source.plugin.name`): the socket name without `.sock`. */
export function pluginName(c: PluginConfig): string {
  return socketFileName(c).slice(0, -'.sock'.length);
}

/** Argo's Discover.IsDefined (docs/argo-contract.md#pluginyaml): fileName, find.glob or find.command set; find.args alone does not count. */
export function discoveryConfigured(c: PluginConfig): boolean {
  const d = c.spec.discover;
  return d.fileName !== '' || d.find.glob !== '' || d.find.command.length > 0;
}

/** The argv Argo runs for a command: command[0], command[1:], then args. */
export function commandArgv(cmd: Command): string[] {
  return [...cmd.command, ...cmd.args];
}

/**
 * sha256 (hex) of the decoded config in a canonical JSON form (sorted keys). Equal for any two
 * plugin.yaml files that decode to the same values, whatever their key order, key case,
 * comments, unknown keys or YAML style; used in cache keys and to detect proxy/worker skew.
 */
export function pluginSpecDigest(c: PluginConfig): string {
  return createHash('sha256').update('cmp-offload plugin spec v1\n').update(canonicalJson(c)).digest('hex');
}

function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(',')}}`;
}
