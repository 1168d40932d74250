import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseClientArgs, UsageError } from '../../../cli/client-args.js';

test('defaults: app path is DIR itself, yaml output, a 60 s timeout, a plugin block without parameters', () => {
  const a = parseClientArgs('generate', ['repo', '--socket', '/s.sock']);
  assert.equal(a.dir, 'repo');
  assert.equal(a.appPath, '.');
  assert.equal(a.output, 'yaml');
  assert.equal(a.timeoutMs, 60_000);
  assert.equal(a.hasPluginBlock, true);
  assert.equal(a.parameters, null);
  assert.deepEqual(a.target, { socket: '/s.sock' });
  assert.deepEqual(a.apiVersions, []);
});

test('repeatable flags keep their order and --local takes a config dir', () => {
  const a = parseClientArgs('match', [
    'repo',
    '--local',
    '--config-dir-path',
    '/cfg',
    '--env',
    'A=1',
    '--env',
    'B==2',
    '--plugin-env',
    'X=$ARGOCD_APP_NAME',
    '--tar-exclude',
    '.git/*',
    '--api-versions',
    'v1,apps/v1',
    '--timeout',
    '1m30s',
    '--no-plugin-block',
  ]);
  assert.deepEqual(a.target, { local: true, configDirPath: '/cfg' });
  assert.deepEqual(a.extraEnv, ['A=1', 'B==2']);
  assert.deepEqual(a.pluginEnv, [{ name: 'X', value: '$ARGOCD_APP_NAME' }]);
  assert.deepEqual(a.tarExclusions, ['.git/*']);
  assert.deepEqual(a.apiVersions, ['v1', 'apps/v1']);
  assert.equal(a.timeoutMs, 90_000);
  assert.equal(a.hasPluginBlock, false);
});

test('--param builds string, array and map parameters grouped by name in first-seen order', () => {
  const a = parseClientArgs('generate', [
    'repo',
    '--socket',
    's',
    '--param',
    'b=x=y',
    '--param',
    'list[]=one',
    '--param',
    'm[k1]=v1',
    '--param',
    'list[]=two',
    '--param',
    'm[k2]=',
  ]);
  assert.deepEqual(JSON.parse(JSON.stringify(a.parameters)), [
    { name: 'b', string: 'x=y' },
    { name: 'list', array: ['one', 'two'] },
    { name: 'm', map: { k1: 'v1', k2: '' } },
  ]);
});

test('--params-json gives full control, including set-but-empty collections and null', () => {
  const a = parseClientArgs('params', ['repo', '--socket', 's', '--params-json', '[{"name":"p","map":{},"array":[],"string":null}]']);
  assert.deepEqual(JSON.parse(JSON.stringify(a.parameters)), [{ name: 'p', map: {}, array: [] }]);
  assert.equal(parseClientArgs('params', ['repo', '--socket', 's', '--params-json', 'null']).parameters, null);
  assert.deepEqual(parseClientArgs('params', ['repo', '--socket', 's', '--params-json', '[]']).parameters, []);
});

test('bad command lines are usage errors', () => {
  const bad: Array<[string[], RegExp]> = [
    [['--socket', 's'], /exactly one DIR, got 0/],
    [['a', 'b', '--socket', 's'], /exactly one DIR, got 2/],
    [['repo'], /exactly one of --socket PATH and --local/],
    [['repo', '--socket', 's', '--local'], /exactly one of --socket PATH and --local/],
    [['repo', '--socket', ''], /--socket needs a path/],
    [['repo', '--socket', 's', '--config-dir-path', 'd'], /only applies with --local/],
    [['repo', '--socket', 's', '--bogus'], /Unknown option '--bogus'/],
    [['repo', '--socket', 's', '--output', 'xml'], /--output must be yaml or json/],
    [['repo', '--socket', 's', '--env', 'NOVALUE'], /--env expects NAME=VALUE/],
    [['repo', '--socket', 's', '--env', '=v'], /--env expects NAME=VALUE/],
    [['repo', '--socket', 's', '--plugin-env', 'X'], /--plugin-env expects NAME=VALUE/],
    [['repo', '--socket', 's', '--param', 'p'], /--param expects NAME=VALUE/],
    [['repo', '--socket', 's', '--param', 'p=1', '--param', 'p=2'], /--param p given twice/],
    [['repo', '--socket', 's', '--params-json', '{'], /--params-json:/],
    [['repo', '--socket', 's', '--params-json', '{}'], /must be a JSON array/],
    [['repo', '--socket', 's', '--params-json', '[{"name":1}]'], /name must be a string/],
    [['repo', '--socket', 's', '--params-json', '[{"map":{"a":1}}]'], /map.a must be a string/],
    [['repo', '--socket', 's', '--params-json', '[{"array":[1]}]'], /array must be a list of strings/],
    [['repo', '--socket', 's', '--params-json', '[{"nme":"x"}]'], /unknown field "nme"/],
    [['repo', '--socket', 's', '--timeout', 'soon'], /--timeout:/],
    [['repo', '--socket', 's', '--timeout=-1s'], /must not be negative/],
    [['repo', '--socket', 's', '--timeout'], /argument missing/],
  ];
  for (const [argv, message] of bad) {
    assert.throws(() => parseClientArgs('generate', argv), (err: unknown) => {
      assert.ok(err instanceof UsageError, `${argv.join(' ')}: ${String(err)}`);
      assert.match(err.message, message, argv.join(' '));
      return true;
    });
  }
});

test('--timeout 0 means no deadline', () => {
  assert.equal(parseClientArgs('generate', ['repo', '--socket', 's', '--timeout', '0']).timeoutMs, 0);
});
