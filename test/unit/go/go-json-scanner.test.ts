import { test } from 'node:test';
import assert from 'node:assert/strict';
import { goJsonSyntaxError, quoteChar, scanJsonValue } from '../../../cmp/go/go-json-scanner.js';

test('valid JSON texts have no syntax error', () => {
  for (const t of ['{}', ' [1, -0.5e+3, "x\\u00e9\\n", true, false, null] ', '"s"', '0', '{"a":{"b":[]}}']) {
    assert.equal(goJsonSyntaxError(t), undefined, t);
  }
});

test('json.Unmarshal syntax errors are worded like Go', () => {
  const cases: Array<[string, string]> = [
    ['', 'unexpected end of JSON input'],
    ['   ', 'unexpected end of JSON input'],
    ['{"a":', 'unexpected end of JSON input'],
    ['true x', "invalid character 'x' after top-level value"],
    ['{"a":1}}', "invalid character '}' after top-level value"],
    ['01', "invalid character '1' after top-level value"],
    ['{"a" 1}', "invalid character '1' after object key"],
    ['{"a":1 "b":2}', "invalid character '\"' after object key:value pair"],
    ['[1 2]', "invalid character '2' after array element"],
    ['[1,]', "invalid character ']' looking for beginning of value"],
    ['{,}', "invalid character ',' looking for beginning of object key string"],
    ["{'a':1}", "invalid character '\\'' looking for beginning of object key string"],
    ['{"a":-}', "invalid character '}' in numeric literal"],
    ['1.e5', "invalid character 'e' after decimal point in numeric literal"],
    // At EOF Go feeds a virtual space, so a cut-off literal complains about ' '.
    ['1e+', "invalid character ' ' in exponent of numeric literal"],
    ['-', "invalid character ' ' in numeric literal"],
    ['1ex', "invalid character 'x' in exponent of numeric literal"],
    ['"a\u0001"', "invalid character '\\x01' in string literal"],
    ['"\\q"', "invalid character 'q' in string escape code"],
    ['"\\u12g4"', "invalid character 'g' in \\u hexadecimal character escape"],
    ['tru}', "invalid character '}' in literal true (expecting 'e')"],
    ['nul', "invalid character ' ' in literal null (expecting 'l')"],
    ['fals', "invalid character ' ' in literal false (expecting 'e')"],
    ['"abc', 'unexpected end of JSON input'],
    ['fxlse', "invalid character 'x' in literal false (expecting 'a')"],
    ['\u00e9', "invalid character 'Ã' looking for beginning of value"],
    ['\\', "invalid character '\\\\' looking for beginning of value"],
  ];
  for (const [text, msg] of cases) assert.equal(goJsonSyntaxError(text), msg, JSON.stringify(text));
});

test('nesting deeper than 10000 levels is rejected like Go', () => {
  assert.equal(goJsonSyntaxError('['.repeat(10000) + ']'.repeat(10000)), undefined);
  assert.equal(goJsonSyntaxError('['.repeat(10001)), "invalid character '[' exceeded max depth");
});

test('quoteChar renders bytes like Go strconv.Quote of the rune U+00XX', () => {
  assert.equal(quoteChar(0x0a), "'\\n'");
  assert.equal(quoteChar(0x00), "'\\x00'");
  assert.equal(quoteChar(0x7f), "'\\x7f'");
  assert.equal(quoteChar(0x80), "'\\u0080'");
  assert.equal(quoteChar(0xa0), "'\\u00a0'");
  assert.equal(quoteChar(0xe9), "'é'");
  assert.equal(quoteChar(0x22), "'\"'");
});

test('scanJsonValue reports the byte range of the next value like json.Decoder', () => {
  const buf = Buffer.from('  {"a": [1, 2]} 12 "x"  ');
  assert.deepEqual(scanJsonValue(buf, 0), { kind: 'value', start: 2, end: 15 });
  assert.deepEqual(scanJsonValue(buf, 15), { kind: 'value', start: 16, end: 18 });
  assert.deepEqual(scanJsonValue(buf, 18), { kind: 'value', start: 19, end: 22 });
  assert.deepEqual(scanJsonValue(buf, 22), { kind: 'eof' });
});

test('scanJsonValue distinguishes unexpected EOF from syntax errors with stream offsets', () => {
  assert.deepEqual(scanJsonValue(Buffer.from('{"a": [1'), 0), { kind: 'unexpected-eof' });
  assert.deepEqual(scanJsonValue(Buffer.from('{}-'), 2), { kind: 'unexpected-eof' });
  assert.deepEqual(scanJsonValue(Buffer.from('{} {"a" 1}'), 2), {
    kind: 'syntax',
    message: "invalid character '1' after object key",
    offset: 9,
  });
});

test('invalid UTF-8 inside strings is not a JSON syntax error', () => {
  assert.deepEqual(scanJsonValue(Buffer.from([0x22, 0xff, 0x22]), 0), { kind: 'value', start: 0, end: 3 });
});
