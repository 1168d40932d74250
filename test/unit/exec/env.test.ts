import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { commandEnv, spawnEnv } from '../../../cmp/exec/env.js';

/** What a real child receives: /usr/bin/env prints its environment, one entry per line. */
function childEnv(env: readonly string[]): string[] {
  const res = spawnSync('/usr/bin/env', [], { env: spawnEnv(env) });
  assert.equal(res.status, 0);
  return res.stdout.toString('utf8').split('\n').slice(0, -1);
}

test('request entries follow the base env, skipping empty names and keeping empty values', () => {
  const env = commandEnv(['HOME=/home/argocd', 'PATH=/bin'], [
    { name: 'ARGOCD_APP_NAME', value: 'guestbook' },
    { name: '', value: 'dropped' },
    { name: 'EMPTY', value: '' },
  ]);
  assert.deepEqual(env, ['HOME=/home/argocd', 'PATH=/bin', 'ARGOCD_APP_NAME=guestbook', 'EMPTY=']);
});

test('a process env object is rendered as NAME=VALUE entries', () => {
  const env = commandEnv({ A: '1', B: '', C: undefined }, [{ name: 'D', value: 'x' }]);
  assert.deepEqual(env, ['A=1', 'B=', 'D=x']);
});

test('the last occurrence of a name wins and keeps its position, as Go dedupEnv does', () => {
  const env = commandEnv(['A=1', 'B=2', 'C=3'], [
    { name: 'A', value: 'override' },
    { name: 'B', value: '' },
  ]);
  assert.deepEqual(childEnv(env), ['C=3', 'A=override', 'B=']);
});

test('names are case-sensitive', () => {
  assert.deepEqual(childEnv(commandEnv(['path=lower'], [{ name: 'PATH', value: 'upper' }])), ['path=lower', 'PATH=upper']);
});

test('a name containing = reaches the child verbatim and is keyed by its first segment', () => {
  const env = commandEnv(['A=original', 'X=1'], [{ name: 'A=B', value: 'C' }]);
  assert.equal(env.at(-1), 'A=B=C');
  // Go keys `A=B=C` as `A`, so it replaces A=original and lands at its own position.
  assert.deepEqual(childEnv(env), ['X=1', 'A=B=C']);
});

test('a leading = belongs to the key, like Go', () => {
  assert.deepEqual(childEnv(['=X=1', '=X=2', '=Y=3']), ['=X=2', '=Y=3']);
});

test('hostile names such as __proto__ are ordinary variables', () => {
  assert.deepEqual(childEnv(commandEnv([], [{ name: '__proto__', value: 'p' }, { name: 'constructor', value: 'c' }])), [
    '__proto__=p',
    'constructor=c',
  ]);
});

test('a NUL byte anywhere fails with the Go start error, even in an entry that is overridden', () => {
  for (const env of [['A=a\0b'], ['A\0B=x'], ['A=a\0', 'A=fine']]) {
    assert.throws(() => spawnEnv(env), { message: 'exec: environment variable contains NUL' });
  }
});

test('commandEnv itself never fails, so the NUL error surfaces when the command starts', () => {
  assert.deepEqual(commandEnv([], [{ name: 'N', value: '\0' }]), ['N=\0']);
});
