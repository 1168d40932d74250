import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseArgs, usage } from '../../../bench/lib/cli.js';

const S = ['ingest', 'split'];

test('run options, --compare with one or two records, and --help are parsed', () => {
  assert.deepEqual(parseArgs([], S), { kind: 'run', quick: false, profile: false, write: false });
  assert.deepEqual(parseArgs(['--quick', '--only', 'split,ingest', '--write', '--profile'], S), {
    kind: 'run', quick: true, profile: true, write: true, only: ['split', 'ingest'],
  });
  assert.deepEqual(parseArgs(['--compare', 'a4b3'], S), { kind: 'compare', a: 'a4b3' });
  assert.deepEqual(parseArgs(['--compare', 'a4b3', 'old.json'], S), { kind: 'compare', a: 'a4b3', b: 'old.json' });
  assert.deepEqual(parseArgs(['--quick', '--help'], S), { kind: 'help' });
});

test('anything else is refused with a one-line message', () => {
  assert.throws(() => parseArgs(['--only', 'split,nope'], S), { message: 'no scenario nope; scenarios: ingest,split' });
  assert.throws(() => parseArgs(['--only'], S), { message: 'unknown argument --only' });
  assert.throws(() => parseArgs(['--fast'], S), { message: 'unknown argument --fast' });
  for (const args of [['--compare'], ['--compare', 'a', 'b', 'c'], ['--quick', '--compare', 'a'], ['--compare', 'a', '--quick']]) {
    assert.throws(() => parseArgs(args, S), { message: '--compare takes one or two records (commits or .json files) and no other option' }, args.join(' '));
  }
});

test('--help documents writing and comparing', () => {
  const text = usage(S);
  for (const s of ['--write', '--compare A B', '--compare A ', 'docs/performance.md', 'bench/results.json', 'ingest,split']) {
    assert.ok(text.includes(s), s);
  }
});
