import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  formatGoDuration,
  formatGoDurationNs,
  parseGoDuration,
  parseGoDurationNs,
} from '../../../cmp/go/go-duration.js';

describe('parseGoDuration', () => {
  const valid: Array<[string, number]> = [
    ['0', 0],
    ['+0', 0],
    ['-0', 0],
    ['90s', 90_000],
    ['1s', 1000],
    ['1m30s', 90_000],
    ['1h2m3.5s', 3_723_500],
    ['500ms', 500],
    ['1.5s', 1500],
    ['.5s', 500],
    ['1.s', 1000],
    ['-1.5h', -5_400_000],
    ['1h1h', 7_200_000],
    ['10us', 0.01],
    ['10µs', 0.01],
    ['10μs', 0.01],
    ['100ns', 0.0001],
    ['0s', 0],
    ['3m0.5s', 180_500],
  ];
  for (const [input, ms] of valid) {
    test(`parses ${JSON.stringify(input)} as ${ms} ms`, () => {
      assert.equal(parseGoDuration(input), ms);
    });
  }

  const invalid: Array<[string, string]> = [
    ['', 'time: invalid duration ""'],
    ['-', 'time: invalid duration "-"'],
    ['s', 'time: invalid duration "s"'],
    ['.', 'time: invalid duration "."'],
    ['.s', 'time: invalid duration ".s"'],
    ['+.s', 'time: invalid duration "+.s"'],
    ['1', 'time: missing unit in duration "1"'],
    ['1.5', 'time: missing unit in duration "1.5"'],
    ['90', 'time: missing unit in duration "90"'],
    ['1d', 'time: unknown unit "d" in duration "1d"'],
    ['1 s', 'time: unknown unit " s" in duration "1 s"'],
    ['3000000h', 'time: invalid duration "3000000h"'],
    ['9223372036854775808ns', 'time: invalid duration "9223372036854775808ns"'],
    ['1é', 'time: unknown unit "\\xc3\\xa9" in duration "1\\xc3\\xa9"'],
  ];
  for (const [input, message] of invalid) {
    test(`rejects ${JSON.stringify(input)} with Go's error text`, () => {
      assert.throws(() => parseGoDuration(input), { message });
    });
  }

  test('handles the int64 extremes exactly, in nanoseconds', () => {
    assert.equal(parseGoDurationNs('9223372036854775807ns'), 9223372036854775807n);
    assert.equal(parseGoDurationNs('-9223372036854775808ns'), -9223372036854775808n);
    assert.equal(parseGoDurationNs('0.123456789s'), 123456789n);
    assert.equal(parseGoDurationNs('0.1234567891s'), 123456789n);
  });
});

describe('formatGoDuration', () => {
  const cases: Array<[number, string]> = [
    [0, '0s'],
    [1000, '1s'],
    [90_000, '1m30s'],
    [3_600_000, '1h0m0s'],
    [3_723_500, '1h2m3.5s'],
    [500, '500ms'],
    [1500, '1.5s'],
    [1.5, '1.5ms'],
    [0.0015, '1.5µs'],
    [0.000001, '1ns'],
    [-90_000, '-1m30s'],
    [100_000, '1m40s'],
    [10_000, '10s'],
  ];
  for (const [ms, text] of cases) {
    test(`formats ${ms} ms as ${text}`, () => {
      assert.equal(formatGoDuration(ms), text);
    });
  }

  test('formats the int64 extremes as Go does', () => {
    assert.equal(formatGoDurationNs(9223372036854775807n), '2562047h47m16.854775807s');
    assert.equal(formatGoDurationNs(-9223372036854775808n), '-2562047h47m16.854775808s');
  });

  test('round-trips its own output', () => {
    for (const text of ['1s', '1m30s', '1h0m0s', '500ms', '2h45m0.001s']) {
      assert.equal(formatGoDuration(parseGoDuration(text)), text);
    }
  });
});
