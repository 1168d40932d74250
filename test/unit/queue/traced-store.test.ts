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

test('a small payload that inflates past the on-loop bound is inflated in the thread pool, whole', async () => {
  const { gunzipStored } = await import('../../../cmp/queue/gzip-stored.js');
  const { gzipSync } = await import('node:zlib');
  // 4 MiB of one byte: a few KiB of gzip, far past what is inflated on the event loop.
  const big = Buffer.alloc(4 * 1024 * 1024, 0x61);
  const gz = gzipSync(big);
  assert.ok(gz.length <= 16 * 1024, `${gz.length} bytes of gzip`);
  assert.ok((await gunzipStored(gz)).equals(big));
  // A caller's own bound still holds, below or above the on-loop one.
  await assert.rejects(gunzipStored(gz, 1024), { code: 'ERR_BUFFER_TOO_LARGE' });
  await assert.rejects(gunzipStored(gz, 1024 * 1024), (err: NodeJS.ErrnoException) => /too large|ERR_BUFFER_TOO_LARGE/i.test(`${err.code} ${err.message}`));
});
