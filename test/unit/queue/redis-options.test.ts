import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { compileOptions } from '../../../cmp/config/options.js';

const URL = 'redis://user:s3cret@127.0.0.1:6390/2';

test('without CMP_OFFLOAD_REDIS_URL the service is standalone', () => {
  assert.equal(compileOptions({}).redis, undefined);
});

test('distributed settings have documented defaults', () => {
  const r = compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, CMP_OFFLOAD_SIGNING_KEY: 'k'.repeat(32) }).redis!;
  assert.equal(r.prefix, '{cmp-offload}');
  assert.deepEqual(r.signingKey, Buffer.from('k'.repeat(32)));
  assert.equal(r.blobTtlMs, 15 * 60_000);
  assert.equal(r.lockDurationMs, 10_000);
  assert.equal(r.stalledIntervalMs, 5_000);
  assert.equal(r.maxQueueDepth, 1_000);
  assert.equal(r.maxInflight, 512);
  assert.equal(r.jobAttempts, 3);
  assert.ok(Object.isFrozen(r));
});

test('the signing key can come from a file, without its trailing newline', () => {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-key-')), 'key');
  fs.writeFileSync(file, 'from-a-file-0123456789\n');
  const r = compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, CMP_OFFLOAD_SIGNING_KEY_FILE: file }).redis!;
  assert.equal(r.signingKey!.toString(), 'from-a-file-0123456789');
  assert.throws(
    () => compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, CMP_OFFLOAD_SIGNING_KEY_FILE: file, CMP_OFFLOAD_SIGNING_KEY: 'x'.repeat(20) }),
    /set only one of CMP_OFFLOAD_SIGNING_KEY and CMP_OFFLOAD_SIGNING_KEY_FILE/,
  );
  fs.rmSync(path.dirname(file), { recursive: true });
});

test('a binary key file is read as bytes, exactly (not decoded as UTF-8)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-key-'));
  const file = path.join(dir, 'key');
  // Invalid UTF-8 (0xff, a lone continuation byte, a cut sequence): decoding would turn each into U+FFFD.
  const key = Buffer.from([0xff, 0x80, 0x00, 0xe2, 0x82, ...Array.from({ length: 27 }, (_, i) => 0x90 + i)]);
  fs.writeFileSync(file, key);
  assert.deepEqual(compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, CMP_OFFLOAD_SIGNING_KEY_FILE: file }).redis!.signingKey, key);
  fs.writeFileSync(file, Buffer.concat([key, Buffer.from('\r\n')]));
  assert.deepEqual(compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, CMP_OFFLOAD_SIGNING_KEY_FILE: file }).redis!.signingKey, key);
  fs.rmSync(dir, { recursive: true });
});

test('bad values name their variable and never echo secrets', () => {
  assert.throws(() => compileOptions({ CMP_OFFLOAD_REDIS_URL: 'http://u:s3cret@h' }), err => {
    assert.match((err as Error).message, /CMP_OFFLOAD_REDIS_URL/);
    assert.doesNotMatch((err as Error).message, /s3cret/);
    return true;
  });
  assert.throws(() => compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, CMP_OFFLOAD_SIGNING_KEY: 'short' }), err => {
    assert.match((err as Error).message, /CMP_OFFLOAD_SIGNING_KEY: the signing key must be at least 16 bytes/);
    assert.doesNotMatch((err as Error).message, /short/);
    return true;
  });
  assert.throws(() => compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, CMP_OFFLOAD_QUEUE_PREFIX: 'a:b' }), /CMP_OFFLOAD_QUEUE_PREFIX/);
  assert.throws(() => compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, CMP_OFFLOAD_MAX_QUEUE_DEPTH: '0' }), /CMP_OFFLOAD_MAX_QUEUE_DEPTH/);
  assert.throws(() => compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, CMP_OFFLOAD_LOCK_DURATION: '10ms' }), /CMP_OFFLOAD_LOCK_DURATION/);
});
