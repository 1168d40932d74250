import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { decodeFailure, encodeFailure, signJob, verifyJob } from '../../../cmp/queue/job-contract.js';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const HEX = 'a'.repeat(64);

function job() {
  return signJob(KEY, {
    kind: 'generate',
    plugin: 'my-plugin',
    specDigest: 'digest',
    appRelPath: 'apps/a',
    env: [{ name: 'ARGOCD_APP_NAME', value: 'a' }],
    blob: HEX,
    size: 10,
    cacheKey: HEX,
    waitId: HEX,
    deadline: null,
    enqueuedAt: 1,
  });
}

test('a signed job verifies and round-trips through JSON', () => {
  const data = job();
  assert.deepEqual(verifyJob(KEY, JSON.parse(JSON.stringify(data))), data);
});

test('a job with any field changed after signing is rejected', () => {
  for (const change of [
    { env: [{ name: 'LD_PRELOAD', value: '/tmp/x.so' }] },
    { appRelPath: '../..' },
    { plugin: 'other' },
    { specDigest: 'x' },
    { size: 11 },
    { cacheKey: null },
  ]) {
    assert.throws(() => verifyJob(KEY, { ...job(), ...change }), /signature does not verify/, JSON.stringify(change));
  }
});

test('unsigned, wrongly keyed and malformed jobs are rejected', () => {
  const { sig: _sig, ...unsigned } = job();
  assert.throws(() => verifyJob(KEY, unsigned), /not signed/);
  assert.throws(() => verifyJob(Buffer.from('another key, 32 bytes long......'), job()), /does not verify/);
  assert.throws(() => verifyJob(KEY, null), /not an object/);
  assert.throws(() => verifyJob(KEY, { ...job(), kind: 'shell' }), /kind is invalid/);
  assert.throws(() => verifyJob(KEY, { ...job(), env: [{ name: 1 }] }), /env is invalid/);
  assert.throws(() => verifyJob(KEY, { ...job(), blob: '../x' }), /blob is invalid/);
});

test('a failure keeps its text and code, and only verifies for its own job', () => {
  const reason = encodeFailure(KEY, '7', { code: Status.UNKNOWN, message: 'error generating manifests: boom', canceled: false });
  assert.deepEqual(decodeFailure(KEY, '7', reason), { code: Status.UNKNOWN, message: 'error generating manifests: boom', canceled: false });
  assert.equal(decodeFailure(KEY, '8', reason), undefined);
  assert.equal(decodeFailure(KEY, '7', reason.replace('boom', 'bang')), undefined);
  assert.equal(decodeFailure(KEY, '7', 'job stalled more than allowable limit'), undefined);
});
