import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  embedded,
  field,
  goBool,
  goFoldName,
  goInt64,
  goJsonUnmarshal,
  goMap,
  goPtr,
  goSlice,
  goString,
  goStruct,
  goTypeName,
  type GoType,
} from '../../../cmp/go/go-json-decode.js';

// Small Go types mirroring Argo's shapes, so the expected texts can be checked against Go by eye.
const command = goStruct('plugin.Command', [field('command', goSlice(goString)), field('args', goSlice(goString))]);
const find = goStruct('plugin.Find', [...embedded('Command', command), field('glob', goString)]);
const item = goStruct('apiclient.Item', [
  field('name', goString),
  field('required', goBool),
  field('array', goSlice(goString)),
  field('map', goMap(goString)),
]);
const root = goStruct('pkg.Root', [
  field('find', find),
  field('items', goSlice(goPtr(item))),
  field('count', goInt64),
  field('limit', goPtr(goInt64)),
  field('Untagged', goString, 'untagged'),
]);

function decode(text: string, t: GoType = root): unknown {
  return goJsonUnmarshal(text, t);
}

function decodeError(text: string, t: GoType = root): string {
  try {
    goJsonUnmarshal(text, t);
  } catch (err) {
    return (err as Error).message;
  }
  assert.fail(`expected ${text} to fail`);
}

const zeroFind = { command: [], args: [], glob: '' };
const zeroItem = { name: '', required: false, array: [], map: {} };

test('Go type names print like reflect.Type.String()', () => {
  assert.equal(goTypeName(goSlice(goPtr(item))), '[]*apiclient.Item');
  assert.equal(goTypeName(goMap(goString)), 'map[string]string');
  assert.equal(goTypeName(goPtr(goInt64)), '*int64');
});

test('an empty object decodes to the zero value with every field present', () => {
  assert.deepEqual(decode('{}'), { find: zeroFind, items: [], count: '0', limit: null, untagged: '' });
});

test('a top-level null leaves the zero value', () => {
  assert.deepEqual(decode(' null '), decode('{}'));
  assert.deepEqual(decode('null', goSlice(goPtr(item))), []);
});

test('keys match exactly or case-insensitively, unknown keys are skipped whatever they hold', () => {
  const v = decode('{"FIND":{"Glob":"g","ARGS":["a"]},"UNTAGGED":"u","other":{"x":[1,{"y":[[[]]]}]},"zz":null}');
  assert.deepEqual(v, { find: { command: [], args: ['a'], glob: 'g' }, items: [], count: '0', limit: null, untagged: 'u' });
});

test('case folding follows Go: the Kelvin sign folds to K and long s to S, dotted and dotless i stay apart', () => {
  assert.equal(goFoldName('\u212Aind'), 'KIND');
  assert.equal(goFoldName('\u017Fpec'), 'SPEC');
  assert.equal(goFoldName('\u0131nit'), '\u0131NIT');
  assert.equal(goFoldName('\u0130nit'), '\u0130NIT');
  assert.deepEqual((decode('{"\u017Fubdir":1,"gLob":"no","f\u0131nd":{"glob":"x"}}') as { find: unknown }).find, zeroFind);
  assert.deepEqual((decode('{"ITEM\u017F":[{"name":"n"}]}') as { items: unknown }).items, [{ ...zeroItem, name: 'n' }]);
});

test('a repeated key decodes again into the same value: scalars take the last, structs merge', () => {
  const v = decode('{"find":{"glob":"a","command":["c"]},"Find":{"glob":"b"},"find":{"glob":null}}');
  assert.deepEqual((v as { find: unknown }).find, { command: ['c'], args: [], glob: 'b' });
});

test('null sets slices, maps and pointers to nil and leaves strings, bools and ints untouched', () => {
  const v = decode('{"count":7,"count":null,"limit":3,"items":[{"name":"n","name":null,"required":true,"required":null,"map":{"a":"b"},"map":null}]}');
  assert.deepEqual(v, {
    find: zeroFind,
    items: [{ ...zeroItem, name: 'n', required: true }],
    count: '7',
    limit: '3',
    untagged: '',
  });
  assert.equal((decode('{"limit":3,"limit":null}') as { limit: unknown }).limit, null);
  assert.deepEqual((decode('{"items":[{}],"items":null}') as { items: unknown }).items, []);
});

test('a null element of a pointer slice is a nil pointer', () => {
  assert.deepEqual(decode('[null,{"name":"x"}]', goSlice(goPtr(item))), [null, { ...zeroItem, name: 'x' }]);
});

test('a null map value is stored as the empty string', () => {
  assert.deepEqual(decode('[{"map":{"a":null,"b":"c"}}]', goSlice(goPtr(item))), [{ ...zeroItem, map: { a: '', b: 'c' } }]);
});

test('map keys that are special in JavaScript are kept as ordinary keys', () => {
  const [v] = decode('[{"map":{"__proto__":"p","constructor":"c"}}]', goSlice(goPtr(item))) as Array<{ map: object }>;
  assert.deepEqual(Object.entries(v!.map), [
    ['__proto__', 'p'],
    ['constructor', 'c'],
  ]);
  assert.equal(Object.getPrototypeOf(v!.map), Object.prototype);
});

test('a repeated slice reuses its backing array, so null elements keep what Go would read there', () => {
  // ["a","b","c"] grows the backing array to capacity 4; ["x"] shortens the slice to 1; two nulls
  // re-expose the stale "b" in the second slot.
  const v = decode('{"find":{"command":["a","b","c"]},"find":{"command":["x"]},"find":{"command":[null,null]}}');
  assert.deepEqual((v as { find: { command: string[] } }).find.command, ['x', 'b']);
  // Past the capacity (8 strings after five appends), Go grows a new zeroed array.
  const w = decode('{"find":{"command":["a","b","c","d","e"]},"find":{"command":["x"]},"find":{"command":[null,null,null,null,null,null,null,null,null]}}');
  assert.deepEqual((w as { find: { command: string[] } }).find.command, ['x', 'b', 'c', 'd', 'e', '', '', '', '']);
  // An empty array replaces the backing array with a new empty one.
  const e = decode('{"find":{"command":["a","b"]},"find":{"command":[]},"find":{"command":[null]}}');
  assert.deepEqual((e as { find: { command: string[] } }).find.command, ['']);
});

test('repeated pointer slices decode into the structs they already point to', () => {
  const v = decode('{"items":[{"name":"a","required":true}],"items":[{"name":"b"}]}');
  assert.deepEqual((v as { items: unknown }).items, [{ ...zeroItem, name: 'b', required: true }]);
});

test('type mismatches name the innermost struct and the JSON path from the root', () => {
  assert.equal(decodeError('{"find":{"glob":1}}'), 'json: cannot unmarshal number into Go struct field Find.find.glob of type string');
  assert.equal(
    decodeError('{"items":[{}, {"required":"true"}]}'),
    'json: cannot unmarshal string into Go struct field Item.items.required of type bool',
  );
  assert.equal(
    decodeError('{"items":[{"map":{"k":false}}]}'),
    'json: cannot unmarshal bool into Go struct field Item.items.map of type string',
  );
  assert.equal(decodeError('{"items":["x"]}'), 'json: cannot unmarshal string into Go struct field Root.items of type apiclient.Item');
  assert.equal(decodeError('{"items":{}}'), 'json: cannot unmarshal object into Go struct field Root.items of type []*apiclient.Item');
  assert.equal(decodeError('{"find":[]}'), 'json: cannot unmarshal array into Go struct field Root.find of type plugin.Find');
  assert.equal(decodeError('{"Untagged":true}'), 'json: cannot unmarshal bool into Go struct field Root.Untagged of type string');
});

test('fields promoted from an embedded struct carry its Go field name in the path', () => {
  assert.equal(
    decodeError('{"find":{"command":"sh -c foo"}}'),
    'json: cannot unmarshal string into Go struct field Find.find.Command.command of type []string',
  );
  assert.equal(
    decodeError('{"find":{"args":[true]}}'),
    'json: cannot unmarshal bool into Go struct field Find.find.Command.args of type string',
  );
});

test('mismatches outside any struct name the Go value type', () => {
  const list = goSlice(goPtr(item));
  assert.equal(decodeError('{}', list), 'json: cannot unmarshal object into Go value of type []*apiclient.Item');
  assert.equal(decodeError('"s"', list), 'json: cannot unmarshal string into Go value of type []*apiclient.Item');
  assert.equal(decodeError('1', list), 'json: cannot unmarshal number into Go value of type []*apiclient.Item');
  assert.equal(decodeError('[{"name":"a"},7]', list), 'json: cannot unmarshal number into Go value of type apiclient.Item');
  assert.equal(decodeError('[]', root), 'json: cannot unmarshal array into Go value of type pkg.Root');
});

test('int64 fields take integers in range only and quote the number when they refuse it', () => {
  assert.equal((decode('{"count":-9223372036854775808}') as { count: string }).count, '-9223372036854775808');
  assert.equal(decodeError('{"count":9223372036854775808}'), 'json: cannot unmarshal number 9223372036854775808 into Go struct field Root.count of type int64');
  assert.equal(decodeError('{"count":1.0}'), 'json: cannot unmarshal number 1.0 into Go struct field Root.count of type int64');
  assert.equal(decodeError('{"count":1e3}'), 'json: cannot unmarshal number 1e3 into Go struct field Root.count of type int64');
  assert.equal(decodeError('{"limit":"x"}'), 'json: cannot unmarshal string into Go struct field Root.limit of type int64');
});

test('decoding goes on after a mismatch and the first mismatch is the one reported', () => {
  assert.equal(
    decodeError('{"find":{"glob":1},"items":[{"required":"no"}],"count":"x"}'),
    'json: cannot unmarshal number into Go struct field Find.find.glob of type string',
  );
  // The context is restored after each field: a later error outside the struct is not mislabelled.
  assert.equal(
    decodeError('[{"name":"ok"},"x"]', goSlice(goPtr(item))),
    'json: cannot unmarshal string into Go value of type apiclient.Item',
  );
});

test('syntax errors are reported before any type error', () => {
  assert.equal(decodeError('{"find":{"glob":1}} x'), "invalid character 'x' after top-level value");
  assert.equal(decodeError(''), 'unexpected end of JSON input');
  assert.equal(decodeError('['), 'unexpected end of JSON input');
});

test('string escapes decode as in Go, invalid surrogates become U+FFFD', () => {
  const v = decode(String.raw`{"untagged":"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00|\ud800|\udc00|\ud800\ud83d\ude00"}`);
  assert.equal((v as { untagged: string }).untagged, 'a"\\/\b\f\n\r\té\u{1F600}|\uFFFD|\uFFFD|\uFFFD\u{1F600}');
});

test('keys with escapes are unescaped before matching', () => {
  assert.equal((decode('{"untagg\\u0065d":"yes"}') as { untagged: string }).untagged, 'yes');
});

test('deeply nested unknown values are skipped without exhausting the stack', () => {
  const deep = '['.repeat(9000) + ']'.repeat(9000);
  assert.deepEqual(decode(`{"unknown":${deep},"untagged":"after"}`), { find: zeroFind, items: [], count: '0', limit: null, untagged: 'after' });
});
