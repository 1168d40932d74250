import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  commandArgv,
  discoveryConfigured,
  parsePluginConfig,
  pluginConfigPath,
  pluginName,
  pluginSpecDigest,
  readPluginConfig,
  socketFileName,
  validatePluginConfig,
  type PluginConfig,
} from '../../../cmp/config/plugin-config.js';
import { yamlToJson } from '../../../cmp/go/yaml-to-json.js';
import { fixturePath } from '../../helpers/paths.js';

const MINIMAL = `apiVersion: argoproj.io/v1alpha1
kind: ConfigManagementPlugin
metadata:
  name: my-plugin
spec:
  generate:
    command: [sh, -c]
    args: ["kustomize build ."]
`;

function parseError(src: string): string {
  try {
    parsePluginConfig(src);
  } catch (err) {
    return (err as Error).message;
  }
  assert.fail(`expected a parse error for:\n${src}`);
}

function validationError(src: string): string {
  const c = parsePluginConfig(src);
  try {
    validatePluginConfig(c);
  } catch (err) {
    return (err as Error).message;
  }
  assert.fail(`expected a validation error for:\n${src}`);
}

test('a minimal plugin.yaml parses to a complete config with zero values elsewhere', () => {
  const c = parsePluginConfig(MINIMAL);
  validatePluginConfig(c);
  assert.equal(c.apiVersion, 'argoproj.io/v1alpha1');
  assert.equal(c.kind, 'ConfigManagementPlugin');
  assert.equal(c.metadata.name, 'my-plugin');
  assert.deepEqual(c.metadata.labels, {});
  assert.deepEqual(c.spec, {
    version: '',
    init: { command: [], args: [] },
    generate: { command: ['sh', '-c'], args: ['kustomize build .'] },
    discover: { fileName: '', find: { command: [], args: [], glob: '' } },
    parameters: { static: [], dynamic: { command: [], args: [] } },
    preserveFileMode: false,
    provideGitCreds: false,
  });
  assert.deepEqual(commandArgv(c.spec.generate), ['sh', '-c', 'kustomize build .']);
  assert.equal(socketFileName(c), 'my-plugin.sock');
  assert.equal(pluginName(c), 'my-plugin');
  assert.equal(discoveryConfigured(c), false);
});

test('validation reports a missing metadata.name first, then the kind, then the generate command', () => {
  assert.equal(validationError(''), 'invalid plugin configuration file. metadata.name should be non-empty');
  assert.equal(validationError('kind: Nope\nspec: {generate: {command: [x]}}'), 'invalid plugin configuration file. metadata.name should be non-empty');
  assert.equal(
    validationError('metadata: {name: p}\nkind: configmanagementplugin\n'),
    'invalid plugin configuration file. kind should be ConfigManagementPlugin, found configmanagementplugin',
  );
  assert.equal(
    validationError('metadata: {name: p}\n'),
    'invalid plugin configuration file. kind should be ConfigManagementPlugin, found ',
  );
  assert.equal(
    validationError('metadata: {name: p}\nkind: ConfigManagementPlugin\nspec: {generate: {args: [x]}}'),
    'invalid plugin configuration file. spec.generate command should be non-empty',
  );
});

test('an empty file, a comment-only file and a null document decode to the zero config', () => {
  for (const src of ['', '# nothing here\n', '~\n', 'null']) {
    const c = parsePluginConfig(src);
    assert.equal(c.metadata.name, '');
    assert.equal(c.kind, '');
    assert.deepEqual(c.spec.generate.command, []);
  }
});

test('only the first YAML document is used', () => {
  const c = parsePluginConfig(`${MINIMAL}---\nkind: Other\nmetadata: {name: second}\n`);
  assert.equal(c.metadata.name, 'my-plugin');
  assert.equal(c.kind, 'ConfigManagementPlugin');
});

test('keys match case-insensitively (KIND, Spec, filename, PreserveFileMode)', () => {
  const c = parsePluginConfig(`APIVERSION: v
KIND: ConfigManagementPlugin
Metadata: {NAME: p}
Spec:
  Generate: {COMMAND: [g]}
  discover: {filename: "*.yaml", FIND: {GLOB: "**/x"}}
  PreserveFileMode: true
  providegitcreds: true
  PARAMETERS:
    STATIC: [{NAME: a, ItemType: string, COLLECTIONTYPE: map, Map: {k: v}}]
    dynamic: {Command: [d], ARGS: [e]}
`);
  validatePluginConfig(c);
  assert.equal(c.apiVersion, 'v');
  assert.equal(c.spec.discover.fileName, '*.yaml');
  assert.equal(c.spec.discover.find.glob, '**/x');
  assert.equal(c.spec.preserveFileMode, true);
  assert.equal(c.spec.provideGitCreds, true);
  assert.deepEqual(c.spec.parameters.static, [
    { name: 'a', title: '', tooltip: '', required: false, itemType: 'string', collectionType: 'map', string: '', array: [], map: { k: 'v' } },
  ]);
  assert.deepEqual(commandArgv(c.spec.parameters.dynamic), ['d', 'e']);
});

test('the kind value itself is compared case-sensitively', () => {
  assert.match(validationError('metadata: {name: p}\nkind: CONFIGMANAGEMENTPLUGIN\nspec: {generate: {command: [g]}}'), /found CONFIGMANAGEMENTPLUGIN$/);
});

test('unknown keys are ignored, including legacy and misspelled ones', () => {
  const c = parsePluginConfig(`${MINIMAL}  allowConcurrency: true
  lockRepo: false
  discovery: {fileName: x}
  fetch: {command: [nope]}
status: {anything: [1, 2, {deep: true}]}
`);
  validatePluginConfig(c);
  assert.equal(discoveryConfigured(c), false);
});

test('a command given as a string is a type error naming Command.spec.generate.command', () => {
  assert.equal(
    parseError(MINIMAL.replace('command: [sh, -c]', 'command: "sh -c foo"')),
    'json: cannot unmarshal string into Go struct field Command.spec.generate.command of type []string',
  );
});

test('a numeric version is a type error naming PluginConfigSpec.spec.version', () => {
  assert.equal(
    parseError(`${MINIMAL}  version: 1.0\n`),
    'json: cannot unmarshal number into Go struct field PluginConfigSpec.spec.version of type string',
  );
});

test('YAML 1.1 typing: y is a boolean, so args: [y] fails; ~ in a command list is the empty string', () => {
  assert.equal(
    parseError(MINIMAL.replace('args: ["kustomize build ."]', 'args: [y]')),
    'json: cannot unmarshal bool into Go struct field Command.spec.generate.args of type string',
  );
  const c = parsePluginConfig(MINIMAL.replace('command: [sh, -c]', 'command: [sh, ~, -c]'));
  assert.deepEqual(c.spec.generate.command, ['sh', '', '-c']);
  assert.equal(parsePluginConfig(`${MINIMAL}  preserveFileMode: yes\n`).spec.preserveFileMode, true);
  assert.equal(parsePluginConfig(MINIMAL.replace('my-plugin', '"on"')).metadata.name, 'on');
  assert.equal(
    parseError(MINIMAL.replace('my-plugin', 'on')),
    'json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.name of type string',
  );
});

test('metadata is a Kubernetes ObjectMeta: its other fields must be type-correct too', () => {
  assert.equal(
    parseError(MINIMAL.replace('name: my-plugin', 'name: my-plugin\n  labels: [a]')),
    'json: cannot unmarshal array into Go struct field ObjectMeta.metadata.labels of type map[string]string',
  );
  assert.equal(
    parseError(MINIMAL.replace('name: my-plugin', 'name: my-plugin\n  annotations: {a: 1}')),
    'json: cannot unmarshal number into Go struct field ObjectMeta.metadata.annotations of type string',
  );
  assert.equal(
    parseError(MINIMAL.replace('name: my-plugin', 'name: my-plugin\n  uid: 5')),
    'json: cannot unmarshal number into Go struct field ObjectMeta.metadata.uid of type types.UID',
  );
  assert.equal(
    parseError(MINIMAL.replace('name: my-plugin', 'name: my-plugin\n  generation: 1.5')),
    'json: cannot unmarshal number 1.5 into Go struct field ObjectMeta.metadata.generation of type int64',
  );
  const c = parsePluginConfig(MINIMAL.replace('name: my-plugin', 'name: my-plugin\n  labels: {a: b}\n  namespace: argocd'));
  assert.deepEqual(c.metadata.labels, { a: 'b' });
  assert.equal(c.metadata.namespace, 'argocd');
});

test('type errors elsewhere name Argo struct and field names, yaml-only tags included', () => {
  const cases: Array<[string, string]> = [
    ['kind: 1', 'json: cannot unmarshal number into Go struct field PluginConfig.TypeMeta.kind of type string'],
    ['metadata: x', 'json: cannot unmarshal string into Go struct field PluginConfig.metadata of type v1.ObjectMeta'],
    ['spec: []', 'json: cannot unmarshal array into Go struct field PluginConfig.spec of type plugin.PluginConfigSpec'],
    ['spec: {init: x}', 'json: cannot unmarshal string into Go struct field PluginConfigSpec.spec.init of type plugin.Command'],
    ['spec: {discover: {find: {command: x}}}', 'json: cannot unmarshal string into Go struct field Find.spec.discover.find.Command.command of type []string'],
    ['spec: {discover: {find: {glob: [a]}}}', 'json: cannot unmarshal array into Go struct field Find.spec.discover.find.glob of type string'],
    ['spec: {discover: {fileName: 1}}', 'json: cannot unmarshal number into Go struct field Discover.spec.discover.fileName of type string'],
    ['spec: {preserveFileMode: "true"}', 'json: cannot unmarshal string into Go struct field PluginConfigSpec.spec.preserveFileMode of type bool'],
    ['spec: {parameters: {static: {a: b}}}', 'json: cannot unmarshal object into Go struct field Parameters.spec.Parameters.Static of type []*apiclient.ParameterAnnouncement'],
    ['spec: {parameters: {static: [x]}}', 'json: cannot unmarshal string into Go struct field Parameters.spec.Parameters.Static of type apiclient.ParameterAnnouncement'],
    ['spec: {parameters: {static: [{required: "no"}]}}', 'json: cannot unmarshal string into Go struct field ParameterAnnouncement.spec.Parameters.Static.required of type bool'],
    ['spec: {parameters: {static: [{map: {a: [1]}}]}}', 'json: cannot unmarshal array into Go struct field ParameterAnnouncement.spec.Parameters.Static.map of type string'],
    ['spec: {parameters: {dynamic: {args: 3}}}', 'json: cannot unmarshal number into Go struct field Command.spec.Parameters.Dynamic.args of type []string'],
    ['- a', 'json: cannot unmarshal array into Go value of type plugin.PluginConfig'],
    ['hello', 'json: cannot unmarshal string into Go value of type plugin.PluginConfig'],
  ];
  for (const [src, want] of cases) assert.equal(parseError(src), want, src);
});

test('the first type error wins even when a later field is also wrong', () => {
  assert.equal(
    parseError('kind: [x]\nmetadata: {name: 1}\n'),
    'json: cannot unmarshal array into Go struct field PluginConfig.TypeMeta.kind of type string',
  );
});

test('YAML syntax errors come from the YAML to JSON conversion', () => {
  assert.match(parseError('metadata:\n  name: a\n b: c\n'), /^error converting YAML to JSON: yaml: line \d+: /);
});

test('a Buffer input parses like the same text', () => {
  assert.deepEqual(parsePluginConfig(Buffer.from(MINIMAL)), parsePluginConfig(MINIMAL));
});

test('a null static entry is kept as null (Argo keeps the nil pointer)', () => {
  const c = parsePluginConfig(`${MINIMAL}  parameters:\n    static:\n      - ~\n      - name: a\n`);
  assert.equal(c.spec.parameters.static.length, 2);
  assert.equal(c.spec.parameters.static[0], null);
  assert.equal(c.spec.parameters.static[1]?.name, 'a');
});

test('socket names join name and version with a dash, with no sanitising', () => {
  const c = parsePluginConfig(`${MINIMAL}  version: v1.0\n`);
  assert.equal(socketFileName(c), 'my-plugin-v1.0.sock');
  assert.equal(pluginName(c), 'my-plugin-v1.0');
  const odd = parsePluginConfig(MINIMAL.replace('my-plugin', '"a/b c"') + '  version: "../x"\n');
  assert.equal(socketFileName(odd), 'a/b c-../x.sock');
});

test('discovery is configured by fileName, find.glob or find.command, not by find.args alone', () => {
  const with_ = (d: string): PluginConfig => parsePluginConfig(`${MINIMAL}  discover: ${d}\n`);
  assert.equal(discoveryConfigured(with_('{fileName: "*.ts"}')), true);
  assert.equal(discoveryConfigured(with_('{find: {glob: "**/Chart.yaml"}}')), true);
  assert.equal(discoveryConfigured(with_('{find: {command: [sh, -c, "true"]}}')), true);
  assert.equal(discoveryConfigured(with_('{find: {args: [x]}}')), false);
  assert.equal(discoveryConfigured(with_('{find: {command: []}}')), false);
});

test('command argv is command[0], the rest of command, then args', () => {
  assert.deepEqual(commandArgv({ command: ['a', 'b'], args: ['c', 'd'] }), ['a', 'b', 'c', 'd']);
  assert.deepEqual(commandArgv({ command: ['a'], args: [] }), ['a']);
});

test('the spec digest ignores key order, key case, comments, unknown keys and YAML style', () => {
  const a = parsePluginConfig(`${MINIMAL}  version: v1\n  discover: {fileName: "*.yaml"}\n`);
  const b = parsePluginConfig(`# a comment
Spec:
  discover:
    filename: '*.yaml'   # same value, other quoting
  VERSION: v1
  generate:
    args:
      - kustomize build .
    command:
      - sh
      - -c
  lockRepo: true
metadata:
  name: "my-plugin"
kind: ConfigManagementPlugin
apiVersion: argoproj.io/v1alpha1
`);
  assert.equal(pluginSpecDigest(a), pluginSpecDigest(b));
  assert.match(pluginSpecDigest(a), /^[0-9a-f]{64}$/);
});

test('the spec digest changes with any decoded value', () => {
  const base = pluginSpecDigest(parsePluginConfig(MINIMAL));
  const variants = [
    MINIMAL.replace('my-plugin', 'other'),
    MINIMAL.replace('kustomize build .', 'kustomize build  .'),
    MINIMAL.replace('command: [sh, -c]', 'command: [sh, -c, ""]'),
    `${MINIMAL}  preserveFileMode: true\n`,
    `${MINIMAL}  provideGitCreds: true\n`,
    `${MINIMAL}  version: v1\n`,
    `${MINIMAL}  parameters: {static: [{name: a}]}\n`,
    `${MINIMAL}  parameters: {static: [~]}\n`,
  ];
  const digests = variants.map((v) => pluginSpecDigest(parsePluginConfig(v)));
  assert.equal(new Set([base, ...digests]).size, variants.length + 1);
});

test('the config path trims trailing slashes from the directory flag', () => {
  assert.equal(pluginConfigPath('/home/argocd/cmp-server/config'), '/home/argocd/cmp-server/config/plugin.yaml');
  assert.equal(pluginConfigPath('/home/argocd/cmp-server/config//'), '/home/argocd/cmp-server/config/plugin.yaml');
  assert.equal(pluginConfigPath('/'), '/plugin.yaml');
});

test('reading a missing plugin.yaml fails with Go os.ReadFile text', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-config-'));
  try {
    await assert.rejects(readPluginConfig(`${dir}/`), { message: `open ${dir}/plugin.yaml: no such file or directory` });
    fs.mkdirSync(path.join(dir, 'plugin.yaml'));
    await assert.rejects(readPluginConfig(dir), { message: `read ${dir}/plugin.yaml: is a directory` });
    await assert.rejects(readPluginConfig(path.join(dir, 'missing')), {
      message: `open ${dir}/missing/plugin.yaml: no such file or directory`,
    });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('reading a plugin.yaml parses and validates it', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-config-'));
  try {
    fs.writeFileSync(path.join(dir, 'plugin.yaml'), MINIMAL);
    assert.equal((await readPluginConfig(dir)).metadata.name, 'my-plugin');
    fs.writeFileSync(path.join(dir, 'plugin.yaml'), MINIMAL.replace('ConfigManagementPlugin', 'Plugin'));
    await assert.rejects(readPluginConfig(dir), {
      message: 'invalid plugin configuration file. kind should be ConfigManagementPlugin, found Plugin',
    });
    fs.writeFileSync(path.join(dir, 'plugin.yaml'), 'spec: {version: 2}\n');
    await assert.rejects(readPluginConfig(dir), {
      message: 'json: cannot unmarshal number into Go struct field PluginConfigSpec.spec.version of type string',
    });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

/**
 * The plugin.yaml documents of a fixture: the file itself, or each `data` value of a ConfigMap
 * (in key order: YAML→JSON sorts keys).
 */
function fixtureConfigs(file: string): string[] {
  const src = fs.readFileSync(fixturePath('plugins', file), 'utf8');
  const doc = JSON.parse(yamlToJson(src)) as { kind?: string; data?: Record<string, string> };
  return doc.kind === 'ConfigMap' ? Object.values(doc.data ?? {}) : [src];
}

test('every real-world fixture parses, validates and gets the expected socket name', () => {
  const expected: Record<string, string[]> = {
    'argo-cd-helmfile.plugin.yaml': ['helmfile.sock'],
    'argocd-lovely-plugin.plugin.yaml': ['argocd-lovely-plugin-v1.0.sock'],
    'argocd-vault-plugin.cmp-plugin.configmap.yaml': [
      'argocd-vault-plugin-helm.sock', // avp-helm.yaml
      'argocd-vault-plugin-kustomize.sock', // avp-kustomize.yaml
      'argocd-vault-plugin.sock', // avp.yaml
    ],
    'cdk8s-typescript.plugin.yaml': ['cdk8s-typescript-v1.0.sock'],
    'konn-jsonnet.plugin.configmap.yaml': ['konn-jsonnet.sock'],
    'kpt.plugin.yaml': ['kpt-v1.0.sock'],
  };
  assert.deepEqual(fs.readdirSync(fixturePath('plugins')).filter((f) => f.endsWith('.yaml')).sort(), Object.keys(expected).sort());
  for (const [file, sockets] of Object.entries(expected)) {
    const configs = fixtureConfigs(file).map((src) => parsePluginConfig(src));
    for (const c of configs) validatePluginConfig(c);
    assert.deepEqual(configs.map(socketFileName), sockets, file);
  }
});

test('fixture details survive parsing: commands, discovery, parameters and flags', () => {
  const [helmfile] = fixtureConfigs('argo-cd-helmfile.plugin.yaml').map((s) => parsePluginConfig(s));
  assert.deepEqual(commandArgv(helmfile!.spec.init), ['argo-cd-helmfile.sh', 'init']);
  assert.deepEqual(commandArgv(helmfile!.spec.discover.find), ['argo-cd-helmfile.sh', 'discover']);
  assert.deepEqual(commandArgv(helmfile!.spec.parameters.dynamic), ['argo-cd-helmfile.sh', 'parameters']);
  assert.equal(discoveryConfigured(helmfile!), true);

  const [lovely] = fixtureConfigs('argocd-lovely-plugin.plugin.yaml').map((s) => parsePluginConfig(s));
  assert.equal(lovely!.spec.parameters.static.length, 17);
  assert.equal(discoveryConfigured(lovely!), false);
  assert.deepEqual(lovely!.spec.parameters.static[4], {
    name: 'lovely_allow_git_checkout',
    title: 'Allow Git Checkout',
    tooltip: 'See the documentation before setting this parameter',
    required: false,
    itemType: '',
    collectionType: 'string',
    string: 'false',
    array: [],
    map: {},
  });

  const avp = fixtureConfigs('argocd-vault-plugin.cmp-plugin.configmap.yaml').map((s) => parsePluginConfig(s));
  assert.equal(avp[0]!.spec.generate.command[2], 'helm template $ARGOCD_APP_NAME -n $ARGOCD_APP_NAMESPACE ${ARGOCD_ENV_HELM_ARGS} . |\nargocd-vault-plugin generate -\n');
  assert.ok(avp.every(discoveryConfigured));

  const [cdk8s] = fixtureConfigs('cdk8s-typescript.plugin.yaml').map((s) => parsePluginConfig(s));
  assert.equal(cdk8s!.spec.discover.fileName, '*.ts');
  assert.deepEqual(commandArgv(cdk8s!.spec.generate), ['cdk8s', 'synth', '--stdout']);

  const [konn] = fixtureConfigs('konn-jsonnet.plugin.configmap.yaml').map((s) => parsePluginConfig(s));
  assert.equal(konn!.spec.provideGitCreds, true);
  assert.equal(konn!.spec.preserveFileMode, false);
  assert.deepEqual(
    konn!.spec.parameters.static.map((p) => [p?.name, p?.string, p?.collectionType, p?.array]),
    [
      ['path', './', '', []],
      ['entrypoint', './application.jsonnet', '', []],
      ['extVars', '', 'array', []],
      ['tlas', '', 'array', []],
      ['libs', '', 'array', []],
    ],
  );

  const [kpt] = fixtureConfigs('kpt.plugin.yaml').map((s) => parsePluginConfig(s));
  assert.equal(kpt!.spec.discover.fileName, 'Kptfile');
  assert.deepEqual(kpt!.spec.generate.command, ['cmp-generate']);
});
