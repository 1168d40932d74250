import { test } from 'node:test';
import assert from 'node:assert/strict';
import { seal, unseal } from '../../../cmp/queue/traced-store.js';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const PARTS = ['cmp-offload/shape/v1', 'family-key', 'field'];

test('a sealed record opens again from the memo, and only for the same key, parts and bytes', async () => {
  const value = { at: 1, shape: { touched: ['a'], listed: [], revision: false } };
  const stored = await seal(KEY, PARTS, value);
  const first = await unseal(KEY, PARTS, stored);
  assert.deepEqual(first, value);
  // The second open is the memo's: the same object.
  assert.equal(await unseal(KEY, PARTS, Buffer.from(stored)), first);
  // Whatever the memo holds, another signing key, other parts or other bytes verify anew.
  assert.equal(await unseal(Buffer.from('x'.repeat(32)), PARTS, stored), undefined);
  assert.equal(await unseal(KEY, [...PARTS.slice(0, 2), 'other-field'], stored), undefined);
  const tampered = Buffer.from(stored);
  tampered[tampered.length - 3]! ^= 1;
  assert.equal(await unseal(KEY, PARTS, tampered), undefined, 'a payload changed under a known signature opened');
  const truncated = stored.subarray(0, stored.length - 1);
  assert.equal(await unseal(KEY, PARTS, truncated), undefined);
});

test('a large record (inflated in the thread pool) opens as a small one does', async () => {
  const value = { paths: Array.from({ length: 20_000 }, (_, i) => `dir-${i}/${(i * 7919).toString(36)}.yaml`) };
  const stored = await seal(KEY, ['cmp-offload/reads/v1', 'reads-key'], value);
  assert.ok(stored.length > 16 * 1024, `only ${stored.length} bytes`);
  assert.deepEqual(await unseal(KEY, ['cmp-offload/reads/v1', 'reads-key'], stored), value);
});
