import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ManifestsTooLarge, splitManifests } from '../../../cmp/split/split-manifests.js';
import { ManifestResponse } from '../../../proto/generated/cmpserver/plugin/plugin.js';
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

// mode sniffing (docs/argo-contract.md#json-mode)
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

// JSON mode (docs/argo-contract.md#json-mode)
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

// YAML mode: document splitting (docs/argo-contract.md#yaml-documents)
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

// Hostile output: the size of what aliases expand to is bounded by the message size limit.
/** The framed ManifestResponse grpc-js would try to send for these manifests. */
const framedBytes = (manifests: string[]) => 5 + ManifestResponse.encode({ manifests, sourceType: '' }).finish().length;

function tooLarge(buf: Buffer, max: number): ManifestsTooLarge {
  try {
    splitManifests(buf, max);
  } catch (err) {
    if (err instanceof ManifestsTooLarge) return err;
    throw err;
  }
  assert.fail('expected ManifestsTooLarge');
}

/** One 64 KiB scalar anchored once and aliased `n` times (about 74 KB of YAML for 3000). */
function aliasBomb(n: number, docs = 1): Buffer {
  const doc = `kind: List\nitems: [&b ${'x'.repeat(64 * 1024)}${',*b'.repeat(n)}]\n`;
  return Buffer.from(Array.from({ length: docs }, () => doc).join('---\n'));
}

test('a 64 KiB scalar aliased 3000 times stops at the message limit, in bounded time and memory', () => {
  const buf = aliasBomb(3000);
  assert.ok(buf.length < 75 * 1000, `${buf.length} bytes of YAML`);
  const max = 100 * 1024 * 1024;
  const heapBefore = process.memoryUsage().heapUsed;
  const t0 = performance.now();
  const err = tooLarge(buf, max);
  const ms = performance.now() - t0;
  const grown = process.memoryUsage().heapUsed - heapBefore;
  // It would be a 196 MB manifest: 3001 copies of the scalar, measured without being written out.
  assert.ok(err.messageBytes > 3001 * 64 * 1024, String(err.messageBytes));
  assert.equal(err.maxBytes, max);
  assert.ok(ms < 10_000, `${ms} ms`);
  assert.ok(grown < 64 * 1024 * 1024, `heap grew by ${grown} bytes`);
});

test('the size reported past the limit is exactly the message grpc-js would have refused', () => {
  for (const docs of [1, 3]) {
    const buf = aliasBomb(40, docs);
    const all = splitManifests(buf);
    const size = framedBytes(all);
    // The whole answer fits a limit of exactly its protobuf size, and not one byte less.
    assert.deepEqual(splitManifests(buf, size - 5), all);
    const err = tooLarge(buf, size - 6);
    assert.equal(err.messageBytes, size);
    // Stopped in the first document: the rest is measured, not built.
    assert.equal(tooLarge(buf, 1024).messageBytes, size);
  }
  // JSON mode and plain YAML too, with escapes and multi-byte characters.
  for (const text of ['{"a": "é<>"}\n{"b": 2}\n', `a: "é<>\\u0001"\nb: [1, 2.5, -0.0, true, ~]\n---\nnull\n---\nc: 1e400\n`]) {
    const buf = Buffer.from(text);
    const size = framedBytes(splitManifests(buf));
    assert.deepEqual(splitManifests(buf, size - 5), splitManifests(buf));
    assert.equal(tooLarge(buf, size - 6).messageBytes, size);
    assert.equal(tooLarge(buf, 0).messageBytes, size);
  }
});

test('an error after the limit is still the error Go reports: the output is split whole first', () => {
  const buf = Buffer.concat([aliasBomb(100), Buffer.from('---\na: 1\n  b: 2\n')]);
  assert.throws(() => splitManifests(buf, 1024), (err: Error) => !(err instanceof ManifestsTooLarge) && err.message === CONV + 'yaml: line 2: mapping values are not allowed in this context');
  const nan = Buffer.concat([aliasBomb(100), Buffer.from('---\na: .nan\n')]);
  assert.throws(() => splitManifests(nan, 1024), { message: CONV + 'json: unsupported value: NaN' });
});

test('shared alias values keep go-yaml\'s alias counting: merges, nested anchors, excessive aliasing', () => {
  // Merge of a shared map, then explicit keys; nested aliases of aliases.
  assert.deepEqual(split('a: &a {x: 1, z: [1, 2]}\nb: &b [*a, *a]\nc: [*b, *b]\nm: {<<: *a, x: 2}\np: {x: 3, <<: *a}\n'), [
    '{"a":{"x":1,"z":[1,2]},"b":[{"x":1,"z":[1,2]},{"x":1,"z":[1,2]}],"c":[[{"x":1,"z":[1,2]},{"x":1,"z":[1,2]}],[{"x":1,"z":[1,2]},{"x":1,"z":[1,2]}]],"m":{"x":2,"z":[1,2]},"p":{"x":1,"z":[1,2]}}',
  ]);
  // The classic laughs still trip go-yaml's ratio (as Go: decodeCount and aliasCount per node).
  const lines = ['a: &a [x, x, x, x, x, x, x, x, x]'];
  for (let i = 1; i < 9; i++) lines.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(9).fill('*' + String.fromCharCode(96 + i)).join(', ')}]`);
  assert.equal(splitError(lines.join('\n') + '\n'), CONV + 'yaml: document contains excessive aliasing');
});
