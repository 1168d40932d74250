import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { createHash } from 'node:crypto';
import { decodeFailure, encodeFailure, INLINE_RESULT_BYTES, INLINE_TARBALL_BYTES, newResultId, openEnv, openResult, requestDigest, sealResult, signJob, verifyJob, type JobRequest } from '../../../cmp/queue/job-contract.js';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const HEX = 'a'.repeat(64);
const NOW = 1_700_000_000_000;

function request(over: Partial<JobRequest> = {}): JobRequest {
  return {
    kind: 'generate',
    plugin: 'my-plugin',
    specDigest: 'digest',
    appRelPath: 'apps/a',
    env: [{ name: 'ARGOCD_APP_NAME', value: 'a' }, { name: 'ARGOCD_ENV_TOKEN', value: 's3cr3t-value' }],
    blob: HEX,
    size: 10,
    cacheKey: HEX,
    resultId: 'b'.repeat(64),
    waitId: HEX,
    deadline: null,
    enqueuedAt: NOW - 1_000,
    expiresAt: NOW + 60_000,
    ...over,
  };
}

const job = (over: Partial<JobRequest> = {}) => signJob(KEY, request(over));

test('a signed job verifies under its own id, round-trips through JSON, and opens its env', () => {
  const data = job();
  assert.deepEqual(verifyJob(KEY, JSON.parse(JSON.stringify(data)), 'b'.repeat(64), NOW), request());
});

test('env values are sealed in the job data: only their names are readable', () => {
  const text = JSON.stringify(job());
  assert.ok(!text.includes('s3cr3t-value'), text);
  assert.deepEqual(job().envNames, ['ARGOCD_APP_NAME', 'ARGOCD_ENV_TOKEN']);
  // Each seal has its own nonce: equal envs do not look alike.
  assert.notEqual(job().envSealed, job().envSealed);
  // A sealed env opens only with its own job's result id.
  assert.throws(() => openEnv(KEY, 'c'.repeat(64), job().envSealed), /does not open/);
});

test('a job with any field changed after signing is rejected', () => {
  const other = job({ env: [{ name: 'LD_PRELOAD', value: '/tmp/x.so' }] });
  for (const change of [
    { envSealed: other.envSealed },
    { envNames: ['LD_PRELOAD'] },
    { appRelPath: '../..' },
    { plugin: 'other' },
    { specDigest: 'x' },
    { size: 11 },
    { cacheKey: null },
    { expiresAt: NOW + 3600_000 },
  ]) {
    assert.throws(() => verifyJob(KEY, { ...job(), ...change }, 'b'.repeat(64), NOW), /signature does not verify/, JSON.stringify(change));
  }
});

test('signed data under another job id (a swap or a re-add) is refused', () => {
  assert.throws(() => verifyJob(KEY, job(), 'c'.repeat(64), NOW), /belongs to job bbbbbbbbbbbb…, not to this one/);
  assert.throws(() => verifyJob(KEY, job(), '17', NOW), /belongs to job/);
});

test('a job past its expiry is refused (no replay), one just before it is not', () => {
  assert.throws(() => verifyJob(KEY, job(), 'b'.repeat(64), NOW + 60_001), /job expired 1 ms ago/);
  assert.doesNotThrow(() => verifyJob(KEY, job(), 'b'.repeat(64), NOW + 60_000));
});

test('unsigned, wrongly keyed and malformed jobs are rejected', () => {
  const id = 'b'.repeat(64);
  const { sig: _sig, ...unsigned } = job();
  assert.throws(() => verifyJob(KEY, unsigned, id, NOW), /not signed/);
  assert.throws(() => verifyJob(Buffer.from('another key, 32 bytes long......'), job(), id, NOW), /does not verify/);
  assert.throws(() => verifyJob(KEY, null, id, NOW), /not an object/);
  assert.throws(() => verifyJob(KEY, { ...job(), v: 1 }, id, NOW), /unsupported job version/);
  assert.throws(() => verifyJob(KEY, { ...job(), kind: 'shell' }, id, NOW), /kind is invalid/);
  assert.throws(() => verifyJob(KEY, { ...job(), envNames: [1] }, id, NOW), /envNames is invalid/);
  assert.throws(() => verifyJob(KEY, { ...job(), blob: '../x' }, id, NOW), /blob is invalid/);
  assert.throws(() => verifyJob(KEY, { ...job(), resultId: '1' }, id, NOW), /resultId is invalid/);
});

test('the request digest changes with every part of the request', () => {
  const base = request();
  const d = requestDigest(base);
  for (const change of [
    { kind: 'match' as const }, { plugin: 'p' }, { specDigest: 'y' }, { appRelPath: 'apps/b' }, { blob: 'c'.repeat(64) }, { size: 9 },
    { env: [{ name: 'ARGOCD_APP_NAME', value: 'b' }] },
    { env: [...base.env].reverse() },
  ]) {
    assert.notEqual(requestDigest({ ...base, ...change }), d, JSON.stringify(change));
  }
  const sameRequestOtherJob: JobRequest = { ...base, resultId: newResultId(), cacheKey: null };
  assert.equal(requestDigest(sameRequestOtherJob), d);
});

test('a failure keeps its text and code, and only verifies for its own job and request', () => {
  const f = { code: Status.UNKNOWN, message: 'error generating manifests: boom', canceled: false };
  const reason = encodeFailure(KEY, '7', HEX, f);
  assert.deepEqual(decodeFailure(KEY, '7', HEX, reason), f);
  assert.equal(decodeFailure(KEY, '8', HEX, reason), undefined);
  assert.equal(decodeFailure(KEY, '7', 'b'.repeat(64), reason), undefined);
  assert.equal(decodeFailure(KEY, '7', HEX, reason.replace('boom', 'bang')), undefined);
  assert.equal(decodeFailure(KEY, '7', HEX, 'job stalled more than allowable limit'), undefined);
});

test('a "send it again" failure keeps its flag under the signature; one without it reads as before (v2 body of three)', () => {
  const f = { code: Status.UNAVAILABLE, message: 'cmp-offload: the tarball x was gone from Redis', canceled: false, resubmit: true };
  const reason = encodeFailure(KEY, '7', HEX, f);
  assert.deepEqual(decodeFailure(KEY, '7', HEX, reason), f);
  // The flag is signed: dropping it breaks the signature rather than turning it into a final error.
  assert.equal(decodeFailure(KEY, '7', HEX, reason.replace(',true]', ']')), undefined);
  const plain = encodeFailure(KEY, '7', HEX, { ...f, resubmit: false });
  assert.match(plain, /:\[14,"[^"]*",false\]$/);
  assert.deepEqual(decodeFailure(KEY, '7', HEX, plain), { code: Status.UNAVAILABLE, message: f.message, canceled: false });
});

test('the trace context travels signed: it round-trips, any change to it (or adding or removing it) is refused, and a job without it verifies as before', () => {
  const tp = `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`;
  const id = 'b'.repeat(64);
  const traced = job({ traceparent: tp });
  assert.deepEqual(verifyJob(KEY, JSON.parse(JSON.stringify(traced)), id, NOW), request({ traceparent: tp }));
  const other = `00-${'3'.repeat(32)}-${'2'.repeat(16)}-01`;
  assert.throws(() => verifyJob(KEY, { ...traced, traceparent: other }, id, NOW), /signature/);
  const { traceparent: _t, ...stripped } = traced;
  assert.throws(() => verifyJob(KEY, stripped, id, NOW), /signature/, 'removing it breaks the signature');
  const plain = job();
  assert.ok(!('traceparent' in plain), 'no field when the request is not traced');
  assert.throws(() => verifyJob(KEY, { ...plain, traceparent: tp }, id, NOW), /signature/, 'adding it breaks the signature');
  assert.throws(() => verifyJob(KEY, { ...job({ traceparent: 'nonsense' }) }, id, NOW), /traceparent is invalid/);
  // tracestate: signed with it, only beside a traceparent, a valid list as the W3C defines it.
  const ts = 'vendor=abc,t@sys=1';
  const stated = job({ traceparent: tp, tracestate: ts });
  assert.deepEqual(verifyJob(KEY, JSON.parse(JSON.stringify(stated)), id, NOW), request({ traceparent: tp, tracestate: ts }));
  assert.throws(() => verifyJob(KEY, { ...stated, tracestate: 'vendor=abd,t@sys=1' }, id, NOW), /signature/);
  assert.throws(() => verifyJob(KEY, { ...traced, tracestate: ts }, id, NOW), /signature/, 'adding it breaks the signature');
  assert.throws(() => verifyJob(KEY, job({ tracestate: ts }), id, NOW), /tracestate is invalid/, 'without a traceparent');
  assert.throws(() => verifyJob(KEY, job({ traceparent: tp, tracestate: 'Bad Key=1' }), id, NOW), /tracestate is invalid/);
  // A job without it signs the same bytes as before the field existed: signed by an older proxy, it verifies.
  assert.deepEqual(verifyJob(KEY, plain, id, NOW), request());
});

test('gitCreds is signed: added to or dropped from a signed job, the job is rejected', () => {
  const withCreds = job({ gitCreds: true });
  assert.equal(verifyJob(KEY, JSON.parse(JSON.stringify(withCreds)), 'b'.repeat(64), NOW).gitCreds, true);
  assert.equal(verifyJob(KEY, job(), 'b'.repeat(64), NOW).gitCreds, undefined);
  const { gitCreds: _, ...dropped } = withCreds;
  assert.throws(() => verifyJob(KEY, dropped, 'b'.repeat(64), NOW), /signature does not verify/);
  assert.throws(() => verifyJob(KEY, { ...job(), gitCreds: true }, 'b'.repeat(64), NOW), /signature does not verify/);
  assert.throws(() => verifyJob(KEY, { ...withCreds, gitCreds: 'yes' }, 'b'.repeat(64), NOW), /gitCreds is invalid/);
});

test('an inline tarball verifies against the signed checksum and size, and comes back as its bytes', () => {
  const bytes = Buffer.from('a small tarball');
  const sha = createHash('sha256').update(bytes).digest('hex');
  const data = job({ blob: sha, size: bytes.length, tgz: bytes.toString('base64') });
  const verified = verifyJob(KEY, JSON.parse(JSON.stringify(data)), 'b'.repeat(64), NOW);
  assert.deepEqual(verified.tarball, bytes);
  // A job without one verifies as before: the tarball is a blob.
  assert.equal(verifyJob(KEY, job(), 'b'.repeat(64), NOW).tarball, undefined);
});

test('a tampered inline tarball is rejected: other bytes, added, malformed or too large', () => {
  const bytes = Buffer.from('a small tarball');
  const sha = createHash('sha256').update(bytes).digest('hex');
  const signed = job({ blob: sha, size: bytes.length, tgz: bytes.toString('base64') });
  const other = Buffer.from('a small tarbal!');
  assert.throws(() => verifyJob(KEY, { ...signed, tgz: other.toString('base64') }, 'b'.repeat(64), NOW), /job field tgz does not match its checksum/);
  assert.throws(() => verifyJob(KEY, { ...signed, tgz: bytes.subarray(1).toString('base64') }, 'b'.repeat(64), NOW), /job field tgz is invalid/);
  assert.throws(() => verifyJob(KEY, { ...signed, tgz: '%%%' }, 'b'.repeat(64), NOW), /job field tgz is invalid/);
  assert.throws(() => verifyJob(KEY, { ...signed, tgz: 7 }, 'b'.repeat(64), NOW), /job field tgz is missing or not a string/);
  // Added to a job of a blob: it must still be that blob's bytes.
  assert.throws(() => verifyJob(KEY, { ...job(), tgz: other.toString('base64') }, 'b'.repeat(64), NOW), /job field tgz/);
  const big = Buffer.alloc(INLINE_TARBALL_BYTES + 1);
  const bigJob = job({ blob: createHash('sha256').update(big).digest('hex'), size: big.length, tgz: big.toString('base64') });
  assert.throws(() => verifyJob(KEY, bigJob, 'b'.repeat(64), NOW), /job field tgz is invalid/);
});

test('resultForm is a hint outside the signature: it round-trips, and changing or dropping it keeps the job valid', () => {
  const id = 'b'.repeat(64);
  const withForm = job({ resultForm: 'manifests' });
  assert.equal(verifyJob(KEY, JSON.parse(JSON.stringify(withForm)), id, NOW).resultForm, 'manifests');
  const { resultForm: _f, ...without } = withForm;
  assert.equal(verifyJob(KEY, without, id, NOW).resultForm, undefined, 'a proxy of an earlier version: the JSON form');
  assert.equal(verifyJob(KEY, { ...withForm, resultForm: 'other' }, id, NOW).resultForm, undefined, 'an unknown value is ignored');
});

test('resultInline is a hint outside the signature: it round-trips, and changing or dropping it keeps the job valid', () => {
  const id = 'b'.repeat(64);
  const withHint = job({ resultInline: true });
  assert.equal(verifyJob(KEY, JSON.parse(JSON.stringify(withHint)), id, NOW).resultInline, true);
  const { resultInline: _i, ...without } = withHint;
  assert.equal(verifyJob(KEY, without, id, NOW).resultInline, undefined, 'a proxy of an earlier version: results under their keys');
  assert.equal(verifyJob(KEY, { ...withHint, resultInline: 'yes' }, id, NOW).resultInline, undefined, 'an unknown value is ignored');
});

test('a result returned inside a job is sealed for that job: it opens with its id and key only, and not when changed or oversized', () => {
  const stored = Buffer.from('CMPM1 signed result bytes');
  const jobId = newResultId();
  const sealed = sealResult(KEY, jobId, stored);
  assert.ok(!Buffer.from(sealed, 'base64').includes(stored.subarray(0, 5)), 'not readable');
  assert.notEqual(sealResult(KEY, jobId, stored), sealed, 'a nonce of its own each time');
  assert.deepEqual(openResult(KEY, jobId, sealed), stored);
  assert.equal(openResult(KEY, newResultId(), sealed), undefined, 'another job');
  assert.equal(openResult(Buffer.from('another key, another key, 012345'), jobId, sealed), undefined, 'another signing key');
  // Not the env's key either: a sealed env is not a sealed result.
  assert.equal(openResult(KEY, jobId, job({ resultId: jobId }).envSealed), undefined);
  const bytes = Buffer.from(sealed, 'base64');
  bytes[15]! ^= 1;
  assert.equal(openResult(KEY, jobId, bytes.toString('base64')), undefined, 'changed');
  assert.equal(openResult(KEY, jobId, 'AAAA'), undefined, 'too short');
  const largest = sealResult(KEY, jobId, Buffer.alloc(INLINE_RESULT_BYTES));
  assert.equal(openResult(KEY, jobId, largest)?.length, INLINE_RESULT_BYTES);
  assert.equal(openResult(KEY, jobId, sealResult(KEY, jobId, Buffer.alloc(INLINE_RESULT_BYTES + 3))), undefined, 'longer than a worker returns');
});
