import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decide } from '../../../keeper/grace.js';

const GRACE = 60_000;

test('a value is applied as derived when nothing is set, when it is equal, or when it drops no path', () => {
  assert.deepEqual(decide('/apps/a', undefined, undefined, 0, GRACE).value, '/apps/a');
  assert.equal(decide('/apps/a', '/apps/a', undefined, 0, GRACE).value, '/apps/a');
  // Grows: a new path.
  assert.deepEqual(decide('/apps/a;/base', '/apps/a', undefined, 0, GRACE), { value: '/apps/a;/base', reason: 'derived from the latest traced generation (drops no path)' });
  // Widens: the old entry lies under a new one.
  assert.equal(decide('/apps', '/apps/a;/apps/b', undefined, 0, GRACE).narrowing, undefined);
  assert.equal(decide('/', '/apps/a;/x', undefined, 0, GRACE).value, '/');
});

test('no derived value removes the annotation at once (Argo CD then always regenerates)', () => {
  assert.equal(decide(undefined, '/apps/a', undefined, 0, GRACE).value, undefined);
  assert.equal(decide(undefined, undefined, undefined, 0, GRACE).value, undefined);
});

test('a dropped path is kept (the union) during the grace period, then removed', () => {
  const first = decide('/apps/a', '/apps/a;/base', undefined, 1000, GRACE);
  assert.equal(first.value, '/apps/a;/base');
  assert.deepEqual(first.narrowing, { value: '/apps/a', since: 1000 });
  assert.match(first.reason, /keeps \/base/);
  // Later, still within the grace period: the same union, the same start.
  const mid = decide('/apps/a', '/apps/a;/base', first.narrowing, 1000 + GRACE - 1, GRACE);
  assert.equal(mid.value, '/apps/a;/base');
  assert.equal(mid.narrowing?.since, 1000);
  const end = decide('/apps/a', '/apps/a;/base', first.narrowing, 1000 + GRACE, GRACE);
  assert.equal(end.value, '/apps/a');
  assert.equal(end.narrowing, undefined);
  assert.match(end.reason, /grace period over/);
  // A different derived value starts its own grace period; the union keeps every entry set so far.
  const other = decide('/apps/b', '/apps/a;/base', first.narrowing, 1000 + GRACE, GRACE);
  assert.deepEqual(other, { value: '/apps/a;/apps/b;/base', reason: other.reason, narrowing: { value: '/apps/b', since: 1000 + GRACE } });
  // A hand-written entry (relative, a pattern) counts as dropped too: kept through the grace period.
  assert.equal(decide('/apps/a', 'values-*.yaml;/apps/a', undefined, 0, GRACE).value, '/apps/a;values-*.yaml');
  // Grace 0: narrowed at once.
  assert.equal(decide('/apps/a', '/apps/a;/base', undefined, 0, 0).value, '/apps/a');
});
