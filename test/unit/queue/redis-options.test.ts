import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { compileOptions, hashTag, OptionsError, redactRedisUrl } from '../../../cmp/config/options.js';

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

const KEYED = { CMP_OFFLOAD_SIGNING_KEY: 'k'.repeat(32) };

test('a plain redis:// or rediss:// URL is one Redis, as before', () => {
  const r = compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, ...KEYED }).redis!;
  assert.deepEqual(r.target, { kind: 'standalone', url: URL });
  assert.equal(r.redacted, 'redis://127.0.0.1:6390/2');
  assert.equal(redactRedisUrl('rediss://:p%40ss@redis.example:6380'), 'rediss://redis.example:6380');
});

test('redis+sentinel:// names the sentinels, the master and the database; credentials are percent-decoded', () => {
  const r = compileOptions({
    CMP_OFFLOAD_REDIS_URL: 'redis+sentinel://app:p%40ss%2Fw0rd@s1.ns.svc:26379,s2.ns.svc,[::1]:26380/argocd/3',
    CMP_OFFLOAD_REDIS_SENTINEL_USERNAME: 'sentinel-user',
    CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD: 'sentinel-s3cret',
    ...KEYED,
  }).redis!;
  assert.deepEqual(r.target, {
    kind: 'sentinel',
    sentinels: [
      { host: 's1.ns.svc', port: 26379 },
      { host: 's2.ns.svc', port: 26379 },
      { host: '::1', port: 26380 },
    ],
    masterName: 'argocd',
    db: 3,
    tls: false,
    username: 'app',
    password: 'p@ss/w0rd',
    sentinelUsername: 'sentinel-user',
    sentinelPassword: 'sentinel-s3cret',
  });
  assert.equal(r.redacted, 'redis+sentinel://s1.ns.svc:26379,s2.ns.svc,[::1]:26380/argocd/3');
  assert.ok(Object.isFrozen(r.target));
  const tls = compileOptions({ CMP_OFFLOAD_REDIS_URL: 'rediss+sentinel://:pw@s1/mymaster', ...KEYED }).redis!.target;
  assert.equal(tls.kind === 'sentinel' && tls.tls && tls.db === 0 && tls.username === undefined && tls.password === 'pw', true);
});

test('the sentinel password may come from a file, without its trailing newline', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-sentinel-'));
  const file = path.join(dir, 'pw');
  fs.writeFileSync(file, 'from-file\n');
  const t = compileOptions({ CMP_OFFLOAD_REDIS_URL: 'redis+sentinel://s1/m', CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE: file, ...KEYED }).redis!.target;
  assert.equal(t.kind === 'sentinel' ? t.sentinelPassword : '', 'from-file');
  assert.throws(
    () => compileOptions({ CMP_OFFLOAD_REDIS_URL: 'redis+sentinel://s1/m', CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE: file, CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD: 'x' }),
    /set only one of CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD and CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE/,
  );
  assert.throws(
    () => compileOptions({ CMP_OFFLOAD_REDIS_URL: 'redis+sentinel://s1/m', CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE: path.join(dir, 'missing') }),
    /cannot read CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE/,
  );
  fs.rmSync(dir, { recursive: true });
});

test('redis+cluster:// lists seed nodes; the prefix must keep a hash tag there', () => {
  const r = compileOptions({ CMP_OFFLOAD_REDIS_URL: 'rediss+cluster://default:s3cret@c1:7000,c2:7001,c3', ...KEYED }).redis!;
  assert.deepEqual(r.target, {
    kind: 'cluster',
    nodes: [
      { host: 'c1', port: 7000 },
      { host: 'c2', port: 7001 },
      { host: 'c3', port: 6379 },
    ],
    tls: true,
    username: 'default',
    password: 's3cret',
  });
  assert.equal(r.redacted, 'rediss+cluster://c1:7000,c2:7001,c3');
  assert.equal(compileOptions({ CMP_OFFLOAD_REDIS_URL: 'redis+cluster://c1/0' }).redis!.target.kind, 'cluster');
  assert.equal(compileOptions({ CMP_OFFLOAD_REDIS_URL: 'redis+cluster://c1', CMP_OFFLOAD_QUEUE_PREFIX: 'team-a{cmp}' }).redis!.prefix, 'team-a{cmp}');
  for (const prefix of ['cmp-offload', '{}cmp', 'cmp}{', '{cmp']) {
    assert.throws(() => compileOptions({ CMP_OFFLOAD_REDIS_URL: 'redis+cluster://c1', CMP_OFFLOAD_QUEUE_PREFIX: prefix }), /CMP_OFFLOAD_QUEUE_PREFIX: expected a prefix with a Redis Cluster hash tag/);
    // One Redis or Sentinel: any prefix, as before.
    assert.equal(compileOptions({ CMP_OFFLOAD_REDIS_URL: 'redis+sentinel://s/m', CMP_OFFLOAD_QUEUE_PREFIX: prefix }).redis!.prefix, prefix);
  }
});

test('hashTag follows Redis: the text between the first { and the next }, when not empty', () => {
  assert.equal(hashTag('{cmp-offload}'), 'cmp-offload');
  assert.equal(hashTag('a{b}c{d}'), 'b');
  assert.equal(hashTag('{}{b}'), undefined);
  assert.equal(hashTag('no-tag'), undefined);
});

test('every bad Redis URL names CMP_OFFLOAD_REDIS_URL and the problem, and never echoes a password', () => {
  const cases: [string, RegExp][] = [
    ['http://u:s3cret@h', /unknown scheme "http"/],
    ['s3cret', /not a URL/],
    ['redis://u:s3cret@', /not a valid URL|no host/],
    ['redis://u:s3cret@h1:6379,h2:6379', /several hosts need redis\+sentinel:\/\/ or redis\+cluster:\/\//],
    ['redis+sentinel://u:s3cret@s1:26379', /needs the master name/],
    ['redis+sentinel://u:s3cret@s1:26379/', /needs the master name/],
    ['redis+sentinel://u:s3cret@s1/m/x', /only a database number/],
    ['redis+sentinel://u:s3cret@s1/m/1/2', /only a database number/],
    ['redis+sentinel://u:s3cret@s1,,s2/m', /an empty host/],
    ['redis+sentinel://u:s3cret@s1:99999/m', /port out of range/],
    ['redis+sentinel://u:s3cret@s1:0/m', /port out of range/],
    ['redis+sentinel://u:s3cret@s 1/m', /not host\[:port\]/],
    ['redis+sentinel://u:s3cret@s1/m?db=1', /query strings/],
    ['redis+sentinel://u:%zz@s1/m', /percent-encoding in the credentials/],
    ['redis+cluster://u:s3cret@c1/1', /only database 0/],
    ['redis+cluster://u:s3cret@', /an empty host/],
    ['redis+foo://u:s3cret@c1', /unknown scheme "redis\+foo"/],
  ];
  for (const [url, why] of cases) {
    assert.throws(() => compileOptions({ CMP_OFFLOAD_REDIS_URL: url }), err => {
      assert.ok(err instanceof OptionsError, url);
      assert.match(err.message, /^invalid value for CMP_OFFLOAD_REDIS_URL: /, url);
      assert.match(err.message, why, url);
      assert.doesNotMatch(err.message, /s3cret|%zz/, url);
      return true;
    });
  }
});

test('the sentinel settings are refused with a URL that is not a sentinel one (they would be ignored)', () => {
  for (const name of ['CMP_OFFLOAD_REDIS_SENTINEL_USERNAME', 'CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD', 'CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE']) {
    for (const url of [URL, 'redis+cluster://c1']) {
      assert.throws(() => compileOptions({ CMP_OFFLOAD_REDIS_URL: url, [name]: 'x' }), new RegExp(`${name} is set but CMP_OFFLOAD_REDIS_URL is not a redis\\+sentinel`));
    }
  }
});

test('redaction never shows credentials, whatever the form, even malformed', () => {
  for (const url of [
    'redis+sentinel://u:s3cret@s1,s2/m',
    'rediss+cluster://:s3cret@c1:7000',
    'redis+sentinel://u:s3c@ret@s1/m',
    'redis+cluster://u:s3cret@c1?x=s3cret',
    'redis://u:s3cret@h:1/0',
    'not a url s3cret',
  ]) {
    assert.doesNotMatch(redactRedisUrl(url), /s3c/, url);
  }
  assert.equal(redactRedisUrl('redis+sentinel://u:s3c@ret@s1/m'), 'redis+sentinel://s1/m');
});
