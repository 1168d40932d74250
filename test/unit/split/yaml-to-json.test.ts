import { test } from 'node:test';
import assert from 'node:assert/strict';
import { yamlToJson } from '../../../cmp/go/yaml-to-json.js';

const PREFIX = 'error converting YAML to JSON: ';

function convError(src: string | Buffer): string {
  try {
    yamlToJson(src);
  } catch (err) {
    return (err as Error).message;
  }
  assert.fail('expected yamlToJson to throw');
}

/** Converts `v: <scalar>` and returns the JSON of the value. */
const value = (scalar: string): string => {
  const out = yamlToJson(`v: ${scalar}\n`);
  return out.slice('{"v":'.length, -1);
};

// Output form
test('keys are sorted byte-wise by their UTF-8 encoding', () => {
  assert.equal(yamlToJson('b: 1\né: 2\na: 3\n_: 4\nB: 5\n"1": 6\n'), '{"1":6,"B":5,"_":4,"a":3,"b":1,"é":2}');
});

test('astral characters sort after U+FFxx keys as in UTF-8, not before as in UTF-16', () => {
  assert.equal(yamlToJson('"\u{1F600}": 2\n"\uFF01": 1\n'), '{"\uFF01":1,"\u{1F600}":2}');
});

test('output is compact and HTML-escaped', () => {
  assert.equal(yamlToJson('a: "<b> & </b>"\nl: [1, {x: z}]\n'), '{"a":"\\u003cb\\u003e \\u0026 \\u003c/b\\u003e","l":[1,{"x":"z"}]}');
});

test('U+2028 and U+2029 are escaped and other non-ASCII text is emitted raw', () => {
  assert.equal(yamlToJson('a: "x\\u2028y\\u2029z é 日本"\n'), '{"a":"x\\u2028y\\u2029z é 日本"}');
});

test('control characters use short escapes where Go has them and lower-case \\u00XX otherwise', () => {
  assert.equal(yamlToJson('a: "\\x01\\x07\\n\\t\\r\\x1f\\\\\\"\\x7f"\n'), '{"a":"\\u0001\\u0007\\n\\t\\r\\u001f\\\\\\"\x7f"}');
});

test('invalid UTF-8 is the go-yaml reader error', () => {
  assert.equal(convError(Buffer.from([0x61, 0x3a, 0x20, 0xc3, 0x28, 0x0a])), PREFIX + 'yaml: invalid trailing UTF-8 octet');
  assert.equal(convError(Buffer.from([0x61, 0x3a, 0x20, 0x80, 0x0a])), PREFIX + 'yaml: invalid leading UTF-8 octet');
});

test('a NUL or other control character is rejected by the reader', () => {
  assert.equal(convError('a: "x\u0000"\n'), PREFIX + 'yaml: control characters are not allowed');
  assert.equal(convError('# \u0007\na: 1\n'), PREFIX + 'yaml: control characters are not allowed');
});

// Booleans and nulls
test('YAML 1.1 booleans are recognised in their listed spellings only', () => {
  for (const t of ['y', 'Y', 'yes', 'Yes', 'YES', 'true', 'True', 'TRUE', 'on', 'On', 'ON']) assert.equal(value(t), 'true', t);
  for (const f of ['n', 'N', 'no', 'No', 'NO', 'false', 'False', 'FALSE', 'off', 'Off', 'OFF']) assert.equal(value(f), 'false', f);
  assert.equal(value('yEs'), '"yEs"');
  assert.equal(value('"yes"'), '"yes"');
});

test('boolean spellings used as keys become "true" and "false"', () => {
  assert.equal(yamlToJson('{x: 1, y: 2}'), '{"true":2,"x":1}');
  assert.equal(yamlToJson('on: a\noff: b\n'), '{"false":"b","true":"a"}');
});

test('null spellings and empty values are null', () => {
  for (const n of ['~', 'null', 'Null', 'NULL', '']) assert.equal(value(n), 'null', n);
  assert.equal(value('nULL'), '"nULL"');
});

// Integers
test('integers follow Go ParseInt with base prefixes after removing underscores', () => {
  const cases: Array<[string, string]> = [
    ['0777', '511'], ['0o777', '511'], ['0x1F', '31'], ['0b101', '5'], ['-0b11', '-3'], ['1_000', '1000'],
    ['00', '0'], ['08', '8'], ['+12', '12'], ['-0', '0'], ['9007199254740993', '9007199254740993'],
    ['-9223372036854775808', '-9223372036854775808'], ['9223372036854775807', '9223372036854775807'],
  ];
  for (const [yaml, json] of cases) assert.equal(value(yaml), json, yaml);
});

test('uint64 values are emitted exactly and beyond them numbers become floats or strings', () => {
  assert.equal(value('18446744073709551615'), '18446744073709551615');
  assert.equal(value('0xFFFFFFFFFFFFFFFF'), '18446744073709551615');
  assert.equal(value('18446744073709551616'), '18446744073709552000');
  assert.equal(value('0xFFFFFFFFFFFFFFFFFF'), '"0xFFFFFFFFFFFFFFFFFF"');
  assert.equal(value('-9223372036854775809'), '-9223372036854776000');
});

// Floats
test('floats are formatted like Go encoding/json', () => {
  const cases: Array<[string, string]> = [
    ['1.0', '1'], ['1.10', '1.1'], ['1e3', '1000'], ['2.5E+3', '2500'], ['.5', '0.5'], ['+.5', '0.5'],
    ['1.5e-7', '1.5e-7'], ['0.000001', '0.000001'], ['1e20', '100000000000000000000'], ['1e21', '1e+21'],
    ['123456789012345678901234', '1.2345678901234569e+23'], ['-0.0', '-0'], ['09.5', '9.5'], ['1_000.5', '1000.5'],
    ['1e-400', '0'],
  ];
  for (const [yaml, json] of cases) assert.equal(value(yaml), json, yaml);
});

test('a float out of range stays a string', () => {
  assert.equal(value('1e400'), '"1e400"');
});

test('infinities and NaN are json.Marshal errors', () => {
  assert.equal(convError('a: .inf\n'), PREFIX + 'json: unsupported value: +Inf');
  assert.equal(convError('a: -.Inf\n'), PREFIX + 'json: unsupported value: -Inf');
  assert.equal(convError('a: .NaN\n'), PREFIX + 'json: unsupported value: NaN');
});

test('sexagesimal numbers and timestamps stay the original strings', () => {
  assert.equal(value('1:20'), '"1:20"');
  assert.equal(value('190:20:30'), '"190:20:30"');
  assert.equal(value('2001-12-14'), '"2001-12-14"');
  assert.equal(value('2001-12-14T21:59:43.10-05:00'), '"2001-12-14T21:59:43.10-05:00"');
  assert.equal(value('2001-12-14 21:59:43.10 -5'), '"2001-12-14 21:59:43.10 -5"');
});

// Tags
test('explicit tags are honoured or ignored like go-yaml', () => {
  assert.equal(value('!!str 123'), '"123"');
  assert.equal(value('!!binary aGVsbG8='), '"hello"');
  assert.equal(value('!foo bar'), '"bar"');
  assert.equal(value('! 12'), '"12"');
  assert.equal(value('!!int "12"'), '12');
  assert.equal(value('!!float 1'), '1');
  assert.equal(value('!!timestamp 2001-12-14'), '"2001-12-14"');
  assert.equal(yamlToJson('!!set {a, b}'), '{"a":null,"b":null}');
  assert.equal(yamlToJson('!!omap [a: 1]'), '[{"a":1}]');
  assert.equal(yamlToJson('!foo {a: 1}'), '{"a":1}');
});

test('a tag that does not fit its scalar is a go-yaml decode error', () => {
  assert.equal(convError('a: !!int abc\n'), PREFIX + 'yaml: cannot decode !!str `abc` as a !!int');
  assert.equal(convError('a: !!int 1.5\n'), PREFIX + 'yaml: cannot decode !!float `1.5` as a !!int');
  assert.equal(convError('a: !!binary "a b"\n'), PREFIX + 'yaml: !!binary value contains invalid base64 data');
});

// Keys
test('non-string keys are stringified with Go rules, float keys as float32 %g', () => {
  assert.equal(yamlToJson('1: a\n-2: b\ntrue: c\n'), '{"-2":"b","1":"a","true":"c"}');
  const floats: Array<[string, string]> = [['1.5', '1.5'], ['0.1', '0.1'], ['3.14159265358979', '3.1415927'], ['1e10', '1e+10'], ['1e-7', '1e-07'], ['1.0', '1'], ['123456.0', '123456'], ['1234567.0', '1.234567e+06']];
  for (const [k, s] of floats) assert.equal(yamlToJson(`${k}: x\n`), `{"${s}":"x"}`, k);
});

test('a null key is the sigs.k8s.io/yaml conversion error', () => {
  assert.equal(convError('~: a\n'), PREFIX + 'unsupported map key of type: %!s(<nil>), key: <nil>, value: "a"');
  assert.equal(convError('? \n: 1\n'), PREFIX + 'unsupported map key of type: %!s(<nil>), key: <nil>, value: 1');
});

test('a uint64 key is the conversion error with the key in hex', () => {
  assert.equal(convError('18446744073709551615: a\n'), PREFIX + 'unsupported map key of type: uint64, key: 0xffffffffffffffff, value: "a"');
});

test('sequence and mapping keys are go-yaml invalid map key errors', () => {
  assert.equal(convError('? [a, b]\n: 1\n'), PREFIX + 'yaml: invalid map key: []interface {}{"a", "b"}');
  assert.equal(convError('? {a: 1}\n: 1\n'), PREFIX + 'yaml: invalid map key: map[interface {}]interface {}{"a":1}');
});

test('a map discarded by a later duplicate key no longer causes a conversion error', () => {
  assert.equal(yamlToJson('a: {~: x}\na: 1\n'), '{"a":1}');
});

test('duplicate keys keep the last value', () => {
  assert.equal(yamlToJson('a: 1\nb: 2\na: 3\n'), '{"a":3,"b":2}');
});

// Anchors, aliases, merge
test('aliases expand to copies of the anchored value', () => {
  assert.equal(yamlToJson('a: &x {k: [1, 2]}\nb: *x\n'), '{"a":{"k":[1,2]},"b":{"k":[1,2]}}');
});

test('merge keys are applied in document order', () => {
  assert.equal(yamlToJson('a: &a {x: 1}\nm: {x: 2, <<: *a}\n'), '{"a":{"x":1},"m":{"x":1}}');
  assert.equal(yamlToJson('a: &a {x: 1}\nm: {<<: *a, x: 2}\n'), '{"a":{"x":1},"m":{"x":2}}');
});

test('a merge list lets earlier maps win', () => {
  assert.equal(yamlToJson('a: &a {x: 1, w: 1}\nb: &b {x: 2, z: 2}\nm:\n  <<: [*a, *b]\n'), '{"a":{"w":1,"x":1},"b":{"x":2,"z":2},"m":{"w":1,"x":1,"z":2}}');
});

test('a quoted << is an ordinary key', () => {
  assert.equal(yamlToJson('"<<": {a: 1}\n'), '{"\\u003c\\u003c":{"a":1}}');
});

test('merging a scalar is a go-yaml error', () => {
  assert.equal(convError('a: {<<: 1}\n'), PREFIX + 'yaml: map merge requires map or sequence of maps as the value');
});

test('an undefined alias is a go-yaml error', () => {
  assert.equal(convError('a: *nope\n'), PREFIX + "yaml: unknown anchor 'nope' referenced");
});

test('an alias inside its own anchor is a go-yaml error', () => {
  assert.equal(convError('a: &x [1, *x]\n'), PREFIX + "yaml: anchor 'x' value contains itself");
});

test('exponential alias expansion is stopped as excessive aliasing', () => {
  const lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'];
  const names = 'abcdefghi';
  for (let i = 1; i < names.length; i++) {
    const p = names[i - 1]!;
    lines.push(`${names[i]}: &${names[i]} [${Array(9).fill('*' + p).join(',')}]`);
  }
  assert.equal(convError(lines.join('\n') + '\n'), PREFIX + 'yaml: document contains excessive aliasing');
});

// Scalars and document shapes
test('block, folded and plain multi-line scalars keep their YAML meaning', () => {
  assert.equal(yamlToJson('a: |\n  x\n  y\nb: >\n  x\n  y\nc: one\n  two\nd: "t\tab"\n'), '{"a":"x\\ny\\n","b":"x y\\n","c":"one two","d":"t\\tab"}');
});

test('non-mapping documents are kept', () => {
  assert.equal(yamlToJson('- a\n- b\n'), '["a","b"]');
  assert.equal(yamlToJson('hello'), '"hello"');
  assert.equal(yamlToJson('""'), '""');
});

test('an empty or comment-only document is null', () => {
  assert.equal(yamlToJson(''), 'null');
  assert.equal(yamlToJson('# nothing\n'), 'null');
  assert.equal(yamlToJson('---\n'), 'null');
});

test('only the first document is used', () => {
  assert.equal(yamlToJson('kind: A\n---\nkind: B\n'), '{"kind":"A"}');
  assert.equal(yamlToJson('---\nkind: A\n---\n: bad: [\n'), '{"kind":"A"}');
  assert.equal(yamlToJson('a: 1\n...\nb: 2\n'), '{"a":1}');
  assert.equal(yamlToJson('--- {a: 1}\n'), '{"a":1}');
});

test('a stream starting with ... has no node', () => {
  assert.equal(convError('...\n'), PREFIX + 'yaml: did not find expected node content');
});

test('Buffer and string input give the same result', () => {
  assert.equal(yamlToJson(Buffer.from('a: é\n')), yamlToJson('a: é\n'));
});

test('deep nesting beyond js-yaml default limit of 100 is accepted', () => {
  const deep = '['.repeat(500) + ']'.repeat(500);
  assert.equal(yamlToJson(deep), deep);
});

// Errors worded like go-yaml
test('common syntax errors are worded like go-yaml', () => {
  assert.equal(convError('invalid yaml: }'), PREFIX + 'yaml: did not find expected node content');
  assert.equal(convError('a:\n\tb: 2\n'), PREFIX + 'yaml: line 2: found character that cannot start any token');
  assert.equal(convError('a: 1\n  b: 2'), PREFIX + 'yaml: line 2: mapping values are not allowed in this context');
  assert.equal(convError('a: b: c\n'), PREFIX + 'yaml: line 1: mapping values are not allowed in this context');
  assert.equal(convError('%YAML 1.1\n'), PREFIX + 'yaml: line 1: did not find expected <document start>');
  assert.equal(convError("a: 'x"), PREFIX + 'yaml: line 1: found unexpected end of stream');
  assert.equal(convError('a: [1, 2\n'), PREFIX + "yaml: line 1: did not find expected ',' or ']'");
  assert.equal(convError('a: {b: 1\n'), PREFIX + "yaml: line 1: did not find expected ',' or '}'");
  assert.equal(convError('@foo\n'), PREFIX + 'yaml: line 1: found character that cannot start any token');
  assert.equal(convError('a: 1\n- b\n'), PREFIX + 'yaml: line 1: did not find expected key');
  assert.equal(convError('- a\nb: 1\n'), PREFIX + "yaml: line 1: did not find expected '-' indicator");
});
