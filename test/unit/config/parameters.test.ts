import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { CmpError } from '../../../cmp/errors.js';
import { parsePluginConfig } from '../../../cmp/config/plugin-config.js';
import { announceParameters, parseDynamicParameters } from '../../../cmp/plugin/parameters.js';
import { ParameterAnnouncement } from '../../../proto/generated/reposerver/repository/repository.js';

const announcement = (over: Partial<ParameterAnnouncement>): ParameterAnnouncement => ({
  name: '',
  title: '',
  tooltip: '',
  required: false,
  itemType: '',
  collectionType: '',
  string: '',
  array: [],
  map: {},
  ...over,
});

function dynamicError(stdout: string): { message: string; code: number } {
  try {
    parseDynamicParameters(stdout);
  } catch (err) {
    assert.ok(err instanceof CmpError);
    return { message: err.message, code: err.code };
  }
  assert.fail(`expected ${JSON.stringify(stdout)} to fail`);
}

const CONFIG = `kind: ConfigManagementPlugin
metadata: {name: p}
spec:
  generate: {command: [g]}
  parameters:
    static:
      - name: s1
        string: default
      - name: s2
        collectionType: array
        array: [a, b]
`;

test('dynamic output decodes every ParameterAnnouncement field by its JSON name', () => {
  const out = parseDynamicParameters(
    '[{"name":"n","title":"t","tooltip":"tt","required":true,"itemType":"string","collectionType":"map","string":"s","array":["x","y"],"map":{"k":"v"}}]',
  );
  assert.deepEqual(out, [
    announcement({ name: 'n', title: 't', tooltip: 'tt', required: true, itemType: 'string', collectionType: 'map', string: 's', array: ['x', 'y'], map: { k: 'v' } }),
  ]);
});

test('dynamic output keys are case-insensitive, unknown keys ignored, the last duplicate wins', () => {
  const out = parseDynamicParameters('[{"NAME":"a","Name":"b","ItemType":"int","unknown":{"x":[1]},"REQUIRED":true,"required":false}]');
  assert.deepEqual(out, [announcement({ name: 'b', itemType: 'int' })]);
});

test('null dynamic output is an empty list; an empty array too; trailing whitespace is fine', () => {
  assert.deepEqual(parseDynamicParameters('null'), []);
  assert.deepEqual(parseDynamicParameters('[]\n\n  \t'), []);
  assert.deepEqual(parseDynamicParameters('  [{"name":"a"}]\r\n'), [announcement({ name: 'a' })]);
});

test('dynamic output errors carry the exact Go json texts of docs/argo-contract.md#getparametersannouncement', () => {
  const cases: Array<[string, string]> = [
    ['', 'unexpected end of JSON input'],
    ['[', 'unexpected end of JSON input'],
    ['{"name":"a"}', 'json: cannot unmarshal object into Go value of type []*apiclient.ParameterAnnouncement'],
    ['"text"', 'json: cannot unmarshal string into Go value of type []*apiclient.ParameterAnnouncement'],
    ['[{"required":"true"}]', 'json: cannot unmarshal string into Go struct field ParameterAnnouncement.required of type bool'],
    ['[{"map":{"a":1}}]', 'json: cannot unmarshal number into Go struct field ParameterAnnouncement.map of type string'],
    ['[] trailing', "invalid character 't' after top-level value"],
    ['[{"array":"x"}]', 'json: cannot unmarshal string into Go struct field ParameterAnnouncement.array of type []string'],
    ['[{"array":[1]}]', 'json: cannot unmarshal number into Go struct field ParameterAnnouncement.array of type string'],
    ['[1]', 'json: cannot unmarshal number into Go value of type apiclient.ParameterAnnouncement'],
    ['true', 'json: cannot unmarshal bool into Go value of type []*apiclient.ParameterAnnouncement'],
  ];
  for (const [stdout, message] of cases) {
    assert.deepEqual(dynamicError(stdout), { message, code: Status.UNKNOWN }, stdout);
  }
});

test('a null element fails like the nil-pointer panic Argo turns into INTERNAL', () => {
  assert.deepEqual(dynamicError('[{"name":"a"},null]'), {
    message: 'runtime error: invalid memory address or nil pointer dereference',
    code: Status.INTERNAL,
  });
});

test('a json error is reported before a null element', () => {
  assert.equal(dynamicError('[null,{"required":1}]').code, Status.UNKNOWN);
});

test('announcements list dynamic entries first, then static ones, without de-duplication', () => {
  const config = parsePluginConfig(CONFIG);
  const dynamic = parseDynamicParameters('[{"name":"d1"},{"name":"s1","string":"dyn"}]');
  assert.deepEqual(announceParameters(config, dynamic), [
    announcement({ name: 'd1' }),
    announcement({ name: 's1', string: 'dyn' }),
    announcement({ name: 's1', string: 'default' }),
    announcement({ name: 's2', collectionType: 'array', array: ['a', 'b'] }),
  ]);
});

test('without dynamic output the static list is announced as parsed', () => {
  const config = parsePluginConfig(CONFIG);
  const list = announceParameters(config);
  assert.deepEqual(list.map((p) => p.name), ['s1', 's2']);
  list[0]!.name = 'mutated';
  assert.equal(config.spec.parameters.static[0]?.name, 's1');
});

test('a null static entry fails the announcement with the INTERNAL panic error', () => {
  const config = parsePluginConfig(`${CONFIG}      - ~\n`);
  assert.throws(() => announceParameters(config), (err: unknown) => {
    assert.ok(err instanceof CmpError);
    assert.equal(err.code, Status.INTERNAL);
    assert.equal(err.message, 'runtime error: invalid memory address or nil pointer dereference');
    return true;
  });
});

test('announcements encode as protobuf and decode back unchanged', () => {
  const [p] = parseDynamicParameters('[{"name":"n","required":true,"array":["x"],"map":{"__proto__":"v","k":"w"}}]');
  const back = ParameterAnnouncement.decode(ParameterAnnouncement.encode(p!).finish());
  assert.equal(back.name, 'n');
  assert.equal(back.required, true);
  assert.deepEqual(back.array, ['x']);
  assert.equal(Object.getOwnPropertyDescriptor(p!.map, '__proto__')?.value, 'v');
  assert.equal(back.map.k, 'w');
});
