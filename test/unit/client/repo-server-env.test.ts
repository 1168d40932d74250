import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  buildRepoServerEnv,
  escapeParamName,
  kubeVersionForPlugins,
  parametersJson,
  repoServerEnvStrings,
  type RepoServerEnvOptions,
} from '../../../cli/repo-server-env.js';
import { goExpand } from '../../../cmp/go/go-expand.js';
import { goJsonString, goJsonStringMap } from '../../../cmp/go/go-json.js';

const base: RepoServerEnvOptions = {
  appName: 'guestbook',
  destNamespace: 'prod',
  project: 'default',
  revision: '0123456789abcdef0123456789abcdef01234567',
  repoUrl: 'https://git.example/repo.git',
  sourcePath: 'apps/guestbook',
  targetRevision: 'main',
  kubeVersion: 'v1.30.1+k3s1',
  apiVersions: ['v1', 'apps/v1'],
};

function valueOf(env: { name: string; value: string }[], name: string): string | undefined {
  return env.find((e) => e.name === name)?.value;
}

test('the manifest env lists the nine ARGOCD_APP_* then KUBE_* then the plugin block, in the repo-server order', () => {
  const env = repoServerEnvStrings({
    ...base,
    hasPluginBlock: true,
    pluginEnv: [{ name: 'FOO', value: 'bar' }],
    parameters: [{ name: 'replicas', string: '2' }],
    extraEnv: ['EXTRA=1'],
  });
  assert.deepEqual(env, [
    'ARGOCD_APP_NAME=guestbook',
    'ARGOCD_APP_NAMESPACE=prod',
    'ARGOCD_APP_PROJECT_NAME=default',
    'ARGOCD_APP_REVISION=0123456789abcdef0123456789abcdef01234567',
    'ARGOCD_APP_REVISION_SHORT=0123456',
    'ARGOCD_APP_REVISION_SHORT_8=01234567',
    'ARGOCD_APP_SOURCE_REPO_URL=https://git.example/repo.git',
    'ARGOCD_APP_SOURCE_PATH=apps/guestbook',
    'ARGOCD_APP_SOURCE_TARGET_REVISION=main',
    'KUBE_VERSION=1.30.1',
    'KUBE_API_VERSIONS=v1,apps/v1',
    'ARGOCD_ENV_FOO=bar',
    'ARGOCD_APP_PARAMETERS=[{"name":"replicas","string":"2"}]',
    'PARAM_REPLICAS=2',
    'EXTRA=1',
  ]);
});

test('empty values are still sent and a short revision is not padded', () => {
  const env = buildRepoServerEnv({ appName: 'a', revision: 'abc' });
  assert.equal(env.length, 11);
  assert.equal(valueOf(env, 'ARGOCD_APP_NAMESPACE'), '');
  assert.equal(valueOf(env, 'ARGOCD_APP_REVISION_SHORT'), 'abc');
  assert.equal(valueOf(env, 'ARGOCD_APP_REVISION_SHORT_8'), 'abc');
  assert.equal(valueOf(env, 'KUBE_VERSION'), '');
  assert.equal(valueOf(env, 'KUBE_API_VERSIONS'), '');
});

test('without a plugin block no ARGOCD_ENV_* and no ARGOCD_APP_PARAMETERS are sent', () => {
  const env = buildRepoServerEnv({ ...base, hasPluginBlock: false, pluginEnv: [{ name: 'X', value: 'y' }] });
  assert.equal(env.length, 11);
  assert.equal(valueOf(env, 'ARGOCD_ENV_X'), undefined);
  assert.equal(valueOf(env, 'ARGOCD_APP_PARAMETERS'), undefined);
});

test('a plugin block without parameters sends ARGOCD_APP_PARAMETERS=null', () => {
  const env = buildRepoServerEnv({ ...base, hasPluginBlock: true });
  assert.deepEqual(env.at(-1), { name: 'ARGOCD_APP_PARAMETERS', value: 'null' });
});

test('an Application outside the control-plane namespace is named <namespace>_<name>', () => {
  assert.equal(valueOf(buildRepoServerEnv({ appName: 'a', appNamespace: 'team' }), 'ARGOCD_APP_NAME'), 'team_a');
  assert.equal(valueOf(buildRepoServerEnv({ appName: 'a', appNamespace: 'argocd' }), 'ARGOCD_APP_NAME'), 'a');
  assert.equal(
    valueOf(buildRepoServerEnv({ appName: 'a', appNamespace: 'ops', controlPlaneNamespace: 'ops' }), 'ARGOCD_APP_NAME'),
    'a',
  );
});

test('plugin env values substitute $VAR and ${VAR} from the build env, $$ to $, unknown names to empty', () => {
  const env = buildRepoServerEnv({
    ...base,
    hasPluginBlock: true,
    pluginEnv: [
      { name: 'A', value: 'ns=$ARGOCD_APP_NAMESPACE' },
      { name: 'B', value: '${ARGOCD_APP_NAME}-${KUBE_VERSION}' },
      { name: 'C', value: 'cost: $$5' },
      { name: 'D', value: '[$NOPE][${NOPE}]' },
      // Earlier plugin env entries are not substitution sources.
      { name: 'E', value: '[$ARGOCD_ENV_A]' },
    ],
  });
  assert.equal(valueOf(env, 'ARGOCD_ENV_A'), 'ns=prod');
  assert.equal(valueOf(env, 'ARGOCD_ENV_B'), 'guestbook-1.30.1');
  assert.equal(valueOf(env, 'ARGOCD_ENV_C'), 'cost: $5');
  assert.equal(valueOf(env, 'ARGOCD_ENV_D'), '[][]');
  assert.equal(valueOf(env, 'ARGOCD_ENV_E'), '[]');
});

test('os.Expand edge cases behave like Go', () => {
  const vars: Record<string, string> = { A: 'x', A_B: 'y', '1': 'one' };
  const map = (n: string) => (n === '$' ? '$' : (vars[n] ?? ''));
  assert.equal(goExpand('$A_B.$A', map), 'y.x');
  assert.equal(goExpand('trailing $', map), 'trailing $');
  assert.equal(goExpand('$.x', map), '$.x');
  assert.equal(goExpand('a${}b', map), 'ab');
  assert.equal(goExpand('a${A', map), 'aA');
  assert.equal(goExpand('$1x', map), 'onex');
  assert.equal(goExpand('${$}', map), '$');
  assert.equal(goExpand('${A:-d}', map), '');
  assert.equal(goExpand('no vars', map), 'no vars');
});

test('a plugin env name containing = is split at the first = like the Go client', () => {
  const env = buildRepoServerEnv({ appName: 'a', hasPluginBlock: true, pluginEnv: [{ name: 'K=V', value: 'w' }] });
  assert.deepEqual(env.at(-2), { name: 'ARGOCD_ENV_K', value: 'V=w' });
});

test('ARGOCD_APP_PARAMETERS orders keys array, map, name, string and keeps set-but-empty collections', () => {
  assert.equal(parametersJson(null), 'null');
  assert.equal(parametersJson([]), '[]');
  assert.equal(
    parametersJson([
      { name: 'all', string: 's', map: { b: '2', a: '1' }, array: ['x', 'y'] },
      { name: 'emptyMap', map: {} },
      { name: 'emptyArray', array: [] },
      { name: '' },
    ]),
    '[{"array":["x","y"],"map":{"a":"1","b":"2"},"name":"all","string":"s"},' +
      '{"map":{},"name":"emptyMap"},{"array":[],"name":"emptyArray"},{"name":""}]',
  );
});

test('ARGOCD_APP_PARAMETERS escapes like Go json.Marshal, HTML characters included', () => {
  assert.equal(
    parametersJson([{ name: '<a&b>', string: 'q"\\\n\t\r\b\f\u0001\u007f\u2028\u2029é' }]),
    '[{"name":"\\u003ca\\u0026b\\u003e","string":"q\\"\\\\\\n\\t\\r\\b\\f\\u0001\u007f\\u2028\\u2029é"}]',
  );
  assert.equal(goJsonString('\ud800'), '"\\ufffd"');
});

test('map keys are sorted by UTF-8 bytes, not by UTF-16 code units', () => {
  // UTF-16 puts U+1F600 (a surrogate pair, 0xD83D...) before U+FF61; UTF-8 puts EF BD A1 before F0 9F 98 80.
  assert.equal(goJsonStringMap({ '\u{1F600}': '1', '\uFF61': '2' }), '{"\uFF61":"2","\u{1F600}":"1"}');
});

test('PARAM_ variables follow the string, map, array order with escaped names', () => {
  const env = repoServerEnvStrings({
    appName: 'a',
    hasPluginBlock: true,
    parameters: [{ name: 'my-param.x', string: 's', map: { 'k-1': 'v1' }, array: ['i0', 'i1'] }],
  });
  assert.deepEqual(env.slice(-4), [
    'PARAM_MY_PARAM_X=s',
    'PARAM_MY_PARAM_X_K_1=v1',
    'PARAM_MY_PARAM_X_0=i0',
    'PARAM_MY_PARAM_X_1=i1',
  ]);
});

test('parameter names are escaped rune by rune with Go simple upper-casing', () => {
  assert.equal(escapeParamName('abc_09'), 'ABC_09');
  assert.equal(escapeParamName('a b/c'), 'A_B_C');
  // ß has no single-rune upper case in Go: one underscore, not "SS".
  assert.equal(escapeParamName('straße'), 'STRA_E');
  // dotless ı and long ſ upper-case to ASCII in Go as well.
  assert.equal(escapeParamName('ıſ'), 'IS');
  assert.equal(escapeParamName('a\u{1F600}b'), 'A_B');
});

test('source-type detection probes send only the nine ARGOCD_APP_* variables', () => {
  const env = buildRepoServerEnv({ ...base, variant: 'detection', hasPluginBlock: true });
  assert.equal(env.length, 9);
  assert.ok(env.every((e) => e.name.startsWith('ARGOCD_APP_')));
});

test('the parameters-announcement env has four ARGOCD_APP_* then the plugin block substituted from those four', () => {
  const env = repoServerEnvStrings({
    ...base,
    variant: 'parameters',
    hasPluginBlock: true,
    pluginEnv: [{ name: 'R', value: '$ARGOCD_APP_SOURCE_PATH@$ARGOCD_APP_REVISION' }],
  });
  assert.deepEqual(env, [
    'ARGOCD_APP_NAME=guestbook',
    'ARGOCD_APP_SOURCE_REPO_URL=https://git.example/repo.git',
    'ARGOCD_APP_SOURCE_PATH=apps/guestbook',
    'ARGOCD_APP_SOURCE_TARGET_REVISION=main',
    'ARGOCD_ENV_R=apps/guestbook@',
    'ARGOCD_APP_PARAMETERS=null',
  ]);
});

test('KUBE_VERSION keeps only the dotted numbers of a generic version', () => {
  assert.equal(kubeVersionForPlugins('v1.30.1+k3s1'), '1.30.1');
  assert.equal(kubeVersionForPlugins('1.30'), '1.30');
  assert.equal(kubeVersionForPlugins('v1.29.4-eks-036c24b'), '1.29.4');
  assert.equal(kubeVersionForPlugins('  v1.030.00'), '1.30.0');
  assert.equal(kubeVersionForPlugins(''), '');
  assert.throws(() => kubeVersionForPlugins('1'), /illegal version string "1"/);
  assert.throws(() => kubeVersionForPlugins('v01.2'), /illegal zero-prefixed version component "01"/);
  assert.throws(() => kubeVersionForPlugins('latest'), /could not parse "latest" as version/);
  assert.throws(() => kubeVersionForPlugins('1.2\nx'), /could not parse/);
});
