import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeResult, encodeResult } from '../../../cmp/queue/result-store.js';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');

test('a stored result decodes to the same value and is compressed', async () => {
  const result = { kind: 'generate' as const, manifests: Array.from({ length: 200 }, (_, i) => `{"kind":"ConfigMap","n":${i % 3}}`) };
  const stored = await encodeResult(KEY, 'k', 'req', result);
  assert.ok(stored.length < JSON.stringify(result).length / 4);
  assert.deepEqual(await decodeResult(KEY, 'k', 'req', stored), result);
});

test('a result is ignored under another key name, for another request, with another signing key, or tampered', async () => {
  const stored = await encodeResult(KEY, 'k', 'req', { kind: 'match', isSupported: true, isDiscoveryEnabled: true });
  assert.ok(await decodeResult(KEY, 'k', 'req', stored));
  assert.equal(await decodeResult(KEY, 'other', 'req', stored), undefined);
  assert.equal(await decodeResult(KEY, 'k', 'another request', stored), undefined);
  assert.equal(await decodeResult(Buffer.from('x'.repeat(32)), 'k', 'req', stored), undefined);
  const tampered = Buffer.from(stored);
  tampered[tampered.length - 5]! ^= 1;
  assert.equal(await decodeResult(KEY, 'k', 'req', tampered), undefined);
  assert.equal(await decodeResult(KEY, 'k', 'req', Buffer.from('{"kind":"generate","manifests":[]}')), undefined);
});
