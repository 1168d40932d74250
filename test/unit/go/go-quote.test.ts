import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { formatArgs, goQuote } from '../../../cmp/go/go-quote.js';

describe('goQuote', () => {
  const cases: Array<[string, string]> = [
    ['', '""'],
    ['abc', '"abc"'],
    ['a "q" \\ b', '"a \\"q\\" \\\\ b"'],
    ['\x07\b\f\n\r\t\v', '"\\a\\b\\f\\n\\r\\t\\v"'],
    ['\x00\x1b\x7f', '"\\x00\\x1b\\x7f"'],
    ['héllo ☺ 日本', '"héllo ☺ 日本"'],
    ['\u00a0\u200b\u2028\ufeff', '"\\u00a0\\u200b\\u2028\\ufeff"'],
    ['\u{1F600}\u{E0001}', '"\u{1F600}\\U000e0001"'],
    ["'single'", '"\'single\'"'],
  ];
  for (const [input, want] of cases) {
    test(`quotes ${JSON.stringify(input)} as Go's strconv.Quote does`, () => {
      assert.equal(goQuote(input), want);
    });
  }

  test('renders bytes that are not valid UTF-8 as \\x escapes', () => {
    assert.equal(goQuote(Buffer.from([0x61, 0xff, 0xe2, 0x82, 0x20, 0xc3, 0xa9])), '"a\\xff\\xe2\\x82 é"');
    assert.equal(goQuote(Buffer.from([0xed, 0xa0, 0x80])), '"\\xed\\xa0\\x80"'); // an encoded surrogate
  });
});

describe('formatArgs', () => {
  test('renders the contract example with the whitespace argument quoted', () => {
    assert.equal(
      formatArgs(['sh', '-c', "echo out; echo '  err line  ' >&2; exit 3"]),
      `sh -c "echo out; echo '  err line  ' >&2; exit 3"`,
    );
  });

  test('renders an empty argument as two double quotes', () => {
    assert.equal(formatArgs(['helm', '', 'x']), 'helm "" x');
  });

  test('leaves arguments without whitespace verbatim, quotes and backslashes included', () => {
    assert.equal(formatArgs(['echo', 'a"b\\c', "it's", 'héllo']), `echo a"b\\c it's héllo`);
  });

  test('quotes arguments holding any Go unicode.IsSpace rune', () => {
    assert.equal(formatArgs(['a\tb']), '"a\\tb"');
    assert.equal(formatArgs(['a\nb']), '"a\\nb"');
    assert.equal(formatArgs(['a\u0085b']), '"a\\u0085b"');
    assert.equal(formatArgs(['a\u00a0b']), '"a\\u00a0b"');
    assert.equal(formatArgs(['a\u3000b']), '"a\\u3000b"');
  });

  test('does not treat U+FEFF or U+200B as whitespace (unlike JS \\s)', () => {
    assert.equal(formatArgs(['a\ufeffb', 'c\u200bd']), 'a\ufeffb c\u200bd');
  });

  test('joins with single spaces and renders no arguments as empty', () => {
    assert.equal(formatArgs([]), '');
    assert.equal(formatArgs(['a', 'b c', 'd']), 'a "b c" d');
  });
});
