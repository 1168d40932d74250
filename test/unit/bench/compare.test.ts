import { test } from 'node:test';
import assert from 'node:assert/strict';
import { caseKey, compareTable, delta } from '../../../bench/lib/compare.js';
import { benchRecord, benchRow } from './fixture.js';

test('a case is matched without its parenthesised figures', () => {
  assert.equal(caseKey('200 apps, 1 changed (12.7× faster)'), '200 apps, 1 changed');
  assert.equal(caseKey('cached (known tarball), proxy CPU (CPU from /proc (10 ms ticks))'), 'cached, proxy CPU');
  assert.equal(caseKey('TRACE_CPUS=one (default) (median of 9)'), 'TRACE_CPUS=one');
});

test('the delta is B − A with the unit and the change in percent; points for % rows', () => {
  const d = (a: number, b: number, unit: string, unitB = unit) => delta(benchRow('s', 'c', a, unit), benchRow('s', 'c', b, unitB));
  assert.equal(d(0.55, 0.6, '×'), '+0.05× (+9 %)');
  assert.equal(d(8.18, 7.5, 'ms'), '-0.68 ms (-8 %)');
  assert.equal(d(1128, 900, 'ms'), '-228 ms (-20 %)');
  assert.equal(d(59, 59, 'MiB'), '0 MiB');
  assert.equal(d(0.551, 0.552, '×'), '0.00×', 'a difference that rounds to zero has no sign');
  assert.equal(d(25, 16, '%'), '-9 pt');
  assert.equal(d(0, 2, ''), '+2');
  assert.equal(d(1, 2, 'ms', 's'), 'units differ (ms, s)');
});

test('two records side by side: B in its order, then rows only A has, failed scenarios named', () => {
  const a = benchRecord('a4b337b', [
    benchRow('ingest', 'realistic text, 66.7 MiB tarball (6.0:1)', 0.551294689190274, '×', false),
    benchRow('queue-overhead', '200 requests (p99 overhead 16.48 ms)', 8.18, 'ms', false),
    benchRow('trace-overhead', 'helm-like, one (median of 9)', 158, '%', false),
    benchRow('trace-overhead', 'helm-like, one (median of 9)', 146, '%', false),
    benchRow('old', 'gone | since', 3, ''),
  ]);
  const b = benchRecord('f396b37', [
    benchRow('queue-overhead', '200 requests (p99 overhead 11.02 ms)', 4.9, 'ms'),
    benchRow('trace-overhead', 'helm-like, one (median of 9)', 120, '%', false),
    benchRow('trace-overhead', 'helm-like, one (median of 9)', 146, '%', false),
    benchRow('split', 'YAML stream', 1.06, '×'),
  ], {
    dirty: true, mode: 'quick', date: '2026-12-05T09:01:02.000Z', node: 'v22.12.0',
    errors: [{ scenario: 'ingest', message: 'redis-server not found' }],
  });
  assert.equal(compareTable(a, b), [
    'A: a4b337b, full run of 2026-12-03 13:28 UTC, Node v20.20.2, AMD EPYC (2 cores), load average 1.4',
    'B: f396b37-dirty, quick run of 2026-12-05 09:01 UTC, Node v22.12.0, AMD EPYC (2 cores), load average 1.4',
    'A is a full run and B a quick run: their inputs differ, and so do most cases.',
    '',
    '| scenario | case | A: a4b337b | B: f396b37-dirty | B − A |',
    '|---|---|---|---|---|',
    '| queue-overhead | 200 requests | 8.18 ms (missed) | 4.90 ms | -3.28 ms (-40 %) |',
    '| trace-overhead | helm-like, one | 158 % (missed) | 120 % (missed) | -38 pt |',
    '| trace-overhead | helm-like, one #2 | 146 % (missed) | 146 % (missed) | 0 pt |',
    '| split | YAML stream | — | 1.06× |  |',
    '| ingest | realistic text, 66.7 MiB tarball | 0.55× (missed) | failed |  |',
    '| old | gone \\| since | 3 | — |  |',
    '',
    'B: ingest failed: redis-server not found',
  ].join('\n'));
});

test('the scenarios an --only run left out are not compared', () => {
  const a = benchRecord('a4b337b', [benchRow('split', 'YAML stream', 1.06, '×'), benchRow('ingest', 'realistic', 0.55, '×', false)]);
  const b = benchRecord('f396b37', [benchRow('split', 'YAML stream', 0.77, '×')], { only: ['split'] });
  assert.deepEqual(compareTable(a, b).split('\n').slice(1), [
    'B: f396b37, full run of split of 2026-12-03 13:28 UTC, Node v20.20.2, AMD EPYC (2 cores), load average 1.4',
    '',
    '| scenario | case | A: a4b337b | B: f396b37 | B − A |',
    '|---|---|---|---|---|',
    '| split | YAML stream | 1.06× | 0.77× | -0.29× (-27 %) |',
  ]);
});

test('two runs of the same mode have no warning line and no failures below the table', () => {
  const r = benchRecord('a4b337b', [benchRow('split', 'YAML stream', 1.06, '×')]);
  assert.equal(compareTable(r, { ...r, commit: 'f396b37' }), [
    'A: a4b337b, full run of 2026-12-03 13:28 UTC, Node v20.20.2, AMD EPYC (2 cores), load average 1.4',
    'B: f396b37, full run of 2026-12-03 13:28 UTC, Node v20.20.2, AMD EPYC (2 cores), load average 1.4',
    '',
    '| scenario | case | A: a4b337b | B: f396b37 | B − A |',
    '|---|---|---|---|---|',
    '| split | YAML stream | 1.06× | 1.06× | 0.00× |',
  ].join('\n'));
});
