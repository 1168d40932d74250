import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { splitManifests } from '../../../cmp/split/split-manifests.js';
import { repoRoot } from './repo-root.js';

const split = (s: string | Buffer): string[] => splitManifests(typeof s === 'string' ? Buffer.from(s, 'utf8') : s);
const FAIL = 'failed to unmarshal manifest: ';
const CONV = FAIL + 'error converting YAML to JSON: ';

function splitError(s: string | Buffer): string {
  try {
    split(s);
  } catch (err) {
    return (err as Error).message;
  }
  assert.fail('expected splitManifests to throw');
}

type GoldenCase = { name: string; input: string; go: string[] };
const golden = JSON.parse(readFileSync(join(repoRoot(), 'test/fixtures/yaml-golden-go.json'), 'utf8')) as { cases: GoldenCase[] };

for (const c of golden.cases) {
  test(`the golden Go case "${c.name}" splits exactly like Argo`, () => {
    const expected = c.go[0]!;
    if (expected.startsWith('ERROR ')) {
      // The golden table used YAMLToJSON directly; inside the splitter Go adds the conversion prefix
      // (except for the separator error, which comes from the line reader).
      const text = expected.slice('ERROR '.length);
      const want = text.startsWith('invalid Yaml document separator') ? FAIL + text : CONV + text;
      assert.equal(splitError(c.input), want);
    } else {
      assert.deepEqual(split(c.input), c.go);
    }
  });
}

test('the golden table has all 35 Go cases', () => {
  assert.equal(golden.cases.length, 35);
});

// §11.1 mode sniffing
test('a UTF-8 BOM is not whitespace, so a BOM-prefixed JSON object is read as YAML', () => {
  assert.deepEqual(split('\ufeff{"b": 1, "a": 2}'), ['{"a":2,"b":1}']);
});

test('a top-level JSON array is read in YAML mode and re-serialised', () => {
  assert.deepEqual(split('[1, 2]\n'), ['[1,2]']);
});

test('leading whitespace up to the 4096-byte sniff window still selects JSON mode', () => {
  assert.deepEqual(split(' '.repeat(4095) + '{"b": 1, "a": 2}'), ['{"b": 1, "a": 2}']);
});

test('more than 4096 bytes of leading whitespace selects YAML mode', () => {
  assert.deepEqual(split('\n'.repeat(4096) + '{"b": 1, "a": 2}'), ['{"a":2,"b":1}']);
});

test('leading Unicode whitespace is skipped by the sniffer but not by the Go JSON scanner', () => {
  // JSON mode was chosen (a YAML-mode error would be worded differently); the scanner rejects U+2003.
  assert.equal(splitError('\u2003{"a": [}'), FAIL + "json: offset 1: invalid character '\u00e2' looking for beginning of value");
});

// §11.2 JSON mode
test('JSON values are passed through verbatim with only outer whitespace trimmed', () => {
  assert.deepEqual(split('{\n  "kind": "ConfigMap",\n  "apiVersion": "v1"\n}\n'), ['{\n  "kind": "ConfigMap",\n  "apiVersion": "v1"\n}']);
});

test('JSON pass-through keeps key order, duplicate keys, number spelling, escapes and HTML characters', () => {
  const doc = '{"z": 1.0, "a": 1e3, "a": 123456789012345678901234567890, "s": "\\u00e9<&>", "t": true}';
  assert.deepEqual(split(`  ${doc}  \n`), [doc]);
});

test('concatenated JSON values with or without whitespace become one string each', () => {
  assert.deepEqual(split('{"a":1}{"b":2}\n{"c":3}'), ['{"a":1}', '{"b":2}', '{"c":3}']);
});

test('after the first object any JSON value is accepted and null is skipped', () => {
  assert.deepEqual(split('{"a":1}\n[1, 2]\n"str"\nnull\n42'), ['{"a":1}', '[1, 2]', '"str"', '42']);
});

test('CRLF between JSON values is whitespace', () => {
  assert.deepEqual(split('{"a":1}\r\n{"b":2}\r\n'), ['{"a":1}', '{"b":2}']);
});

test('a JSON error after one value falls back to YAML for the rest of the stream', () => {
  assert.deepEqual(split('{"a":1}\n---\n{"b": 2, "a": 1}\n---\nc: 3\n'), ['{"a":1}', '{"a":1,"b":2}', '{"c":3}']);
});

test('garbage after one JSON value becomes a YAML string document', () => {
  assert.deepEqual(split('{"a":1}\ngarbage\n'), ['{"a":1}', '"garbage"']);
});

test('a trailing comment-like text after the JSON value is a YAML plain scalar', () => {
  assert.deepEqual(split('{"a":1} // c'), ['{"a":1}', '"// c"']);
});

test('invalid JSON that is valid YAML is accepted through the fallback', () => {
  assert.deepEqual(split('{"a":}'), ['{"a":null}']);
  assert.deepEqual(split('{"a":1,}'), ['{"a":1}']);
  assert.deepEqual(split("{'a': 1}"), ['{"a":1}']);
});

test('when YAML also fails the JSON syntax error is reported with its stream offset', () => {
  assert.equal(splitError('{"a": [}'), FAIL + "json: offset 8: invalid character '}' looking for beginning of value");
});

test('after two JSON values the plain Go json error is returned without falling back', () => {
  assert.equal(splitError('{"a":1}\n{"b":2}\n---\nc: 3\n'), FAIL + "invalid character '-' in numeric literal");
});

test('a truncated JSON stream that YAML cannot read either reports unexpected EOF', () => {
  assert.equal(splitError('{"a": [1, 2'), FAIL + 'unexpected EOF');
});

test('the fallback gives up when fewer than four bytes follow the last JSON value', () => {
  assert.equal(splitError('{"a":1}  x'), FAIL + "json: offset 10: invalid character 'x' looking for beginning of value");
});

test('a YAML error after the fallback succeeded is reported as a YAML error', () => {
  assert.equal(
    splitError('{"a":1}\n---\nb: 2\n---\nc: [1, 2\n'),
    CONV + "yaml: line 1: did not find expected ',' or ']'",
  );
});

test('a separator error right after the JSON value is hidden behind the JSON error', () => {
  assert.equal(splitError('{"a":1}\n--- x\n'), FAIL + "json: offset 10: invalid character '-' in numeric literal");
});

// §11.3 YAML mode: document splitting
test('CRLF line endings are normalised, including inside block scalars', () => {
  assert.deepEqual(split('a: 1\r\n---\r\nb: |\r\n  x\r\n  y\r\n'), ['{"a":1}', '{"b":"x\\ny\\n"}']);
});

test('a final line without newline gets one, which keep-chomping block scalars can see', () => {
  assert.deepEqual(split('a: |+\n  x'), ['{"a":"x\\n"}']);
});

test('a separator followed by content is an error naming the trimmed rest', () => {
  assert.equal(splitError('a: 1\n--- b: 2\n'), FAIL + 'invalid Yaml document separator: b: 2');
  assert.equal(splitError('a: 1\n----\n'), FAIL + 'invalid Yaml document separator: -');
  assert.equal(splitError('--- |\n  x\n'), FAIL + 'invalid Yaml document separator: |');
});

test('a separator followed by a comment or whitespace is valid', () => {
  assert.deepEqual(split('a: 1\n---#c\nb: 2\n---   # x\nc: 3\n--- \t\nd: 4'), ['{"a":1}', '{"b":2}', '{"c":3}', '{"d":4}']);
});

test('an indented --- is ordinary content', () => {
  assert.deepEqual(split('key: value\n ---\n'), ['{"key":"value ---"}']);
});

test('empty, comment-only, null and ~ documents produce nothing', () => {
  assert.deepEqual(split('---\n---\n\n---\n# c\n---\nnull\n---\n~\n---\na: 1\n---\n'), ['{"a":1}']);
  assert.deepEqual(split(''), []);
  assert.deepEqual(split('\n\n'), []);
});

test('content after a ... end marker in the same chunk is dropped', () => {
  assert.deepEqual(split('a: 1\n...\nb: 2\n'), ['{"a":1}']);
  assert.deepEqual(split('a: 1\n...\nb: [unclosed\n---\nc: 3'), ['{"a":1}', '{"c":3}']);
});

test('a chunk that is just ... is an error', () => {
  assert.equal(splitError('a: 1\n---\n...\n'), CONV + 'yaml: did not find expected node content');
});

test('a %YAML directive fails because its chunk is parsed alone', () => {
  assert.equal(splitError('%YAML 1.1\n---\na: 1\n'), CONV + 'yaml: line 1: did not find expected <document start>');
});

test('any failing document discards the documents already converted', () => {
  assert.equal(splitError('a: 1\n---\nb: .inf\n'), CONV + 'json: unsupported value: +Inf');
});

test('YAML error line numbers count from the start of the document chunk', () => {
  assert.equal(splitError('a: 1\n---\nb: 1\n  c: 2\n'), CONV + 'yaml: line 2: mapping values are not allowed in this context');
});

test('invalid UTF-8 anywhere in a YAML document is an error', () => {
  assert.equal(splitError(Buffer.from([0x61, 0x3a, 0x20, 0xff, 0x0a])), CONV + 'yaml: invalid leading UTF-8 octet');
});

test('a BOM-prefixed YAML stream parses', () => {
  assert.deepEqual(split('\ufeffa: 1\n---\nb: 2\n'), ['{"a":1}', '{"b":2}']);
});

test('deeply nested documents (121 levels) convert', () => {
  let doc = '';
  for (let i = 0; i < 121; i++) doc += `${'  '.repeat(i)}k${i}:\n`;
  doc += `${'  '.repeat(121)}v: 1\n`;
  const [out] = split(doc);
  assert.ok(out!.startsWith('{"k0":{"k1":'));
  assert.ok(out!.endsWith('{"v":1}' + '}'.repeat(121)));
});

test('the error message always starts with the Argo prefix', () => {
  assert.match(splitError('a: [\n'), /^failed to unmarshal manifest: error converting YAML to JSON: yaml: /);
});
