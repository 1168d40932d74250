import { test } from 'node:test';
import assert from 'node:assert/strict';
import zlib from 'node:zlib';
import { decodeResult, encodeResult } from '../../../cmp/queue/result-store.js';
import { sign } from '../../../cmp/queue/signing.js';
import { preparedOf } from '../../../cmp/split/prepared.js';
import { ManifestResponse } from '../../../proto/generated/cmpserver/plugin/plugin.js';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');

test('a stored result decodes to the same value and is compressed', async () => {
  const result = { kind: 'generate' as const, manifests: Array.from({ length: 200 }, (_, i) => `{"kind":"ConfigMap","n":${i % 3}}`) };
  const stored = await encodeResult(KEY, 'k', 'req', result);
  assert.ok(stored.length < JSON.stringify(result).length / 4);
  assert.deepEqual(await decodeResult(KEY, 'k', 'req', stored), result);
});

test('a generate result is stored as its ManifestResponse and read back prepared; a JSON entry still reads', async () => {
  const manifests = Array.from({ length: 3000 }, (_, i) => `{"kind":"ConfigMap","n":"${'é'.repeat(i % 50)}"}`);
  const stored = await encodeResult(KEY, 'k', 'req', { kind: 'generate', manifests });
  assert.equal(stored.subarray(0, 5).toString(), 'CMPM1');
  const read = (await decodeResult(KEY, 'k', 'req', stored))!;
  const prepared = preparedOf(read)!;
  assert.deepEqual(prepared.encoded, Buffer.from(ManifestResponse.encode({ manifests, sourceType: '' }).finish()));
  assert.equal(prepared.count, manifests.length);
  assert.equal(prepared.bytes, Buffer.byteLength(manifests.join('')));
  assert.deepEqual(read, { kind: 'generate', manifests });
  // Copied under another key: the same payload, signed for it.
  const copy = await encodeResult(KEY, 'k2', 'req2', read);
  assert.deepEqual(copy.subarray(37), stored.subarray(37));
  assert.deepEqual(await decodeResult(KEY, 'k2', 'req2', copy), { kind: 'generate', manifests });
  // The JSON form of earlier versions (CMPR1, its own domain).
  const payload = zlib.gzipSync(JSON.stringify({ kind: 'generate', manifests }));
  const old = Buffer.concat([Buffer.from('CMPR1'), sign(KEY, 'cmp-offload/result/v2', ['k', 'req', payload]), payload]);
  assert.deepEqual(await decodeResult(KEY, 'k', 'req', old), { kind: 'generate', manifests });
  // Written in that form for a proxy of an earlier version (a job without resultForm): the same bytes.
  const prepared2 = (await decodeResult(KEY, 'k', 'req', stored))!;
  assert.deepEqual(await encodeResult(KEY, 'k', 'req', prepared2, 'json'), old);
  assert.deepEqual(await encodeResult(KEY, 'k', 'req', { kind: 'generate', manifests }, 'json'), old);
  // A payload signed as one form does not verify as the other.
  assert.equal(await decodeResult(KEY, 'k', 'req', Buffer.concat([Buffer.from('CMPM1'), old.subarray(5)])), undefined);
  assert.equal(await decodeResult(KEY, 'k', 'req', Buffer.concat([Buffer.from('CMPR1'), stored.subarray(5)])), undefined);
  // Signed but not a ManifestResponse of manifests: refused.
  for (const body of [Buffer.from([0x12, 0x01, 0x41]), Buffer.from([0x0a, 0x05, 0x41]), Buffer.from([0x0a, 0x80])]) {
    const gz = zlib.gzipSync(body);
    const bad = Buffer.concat([Buffer.from('CMPM1'), sign(KEY, 'cmp-offload/result-manifests/v1', ['k', 'req', gz]), gz]);
    assert.equal(await decodeResult(KEY, 'k', 'req', bad), undefined);
  }
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
