import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cacheKey, type CacheKeyInput } from '../../../cmp/cache/cache-key.js';
import { MemoryCache } from '../../../cmp/cache/memory-cache.js';

const base: CacheKeyInput = {
  plugin: 'helm-v1',
  specDigest: 'spec',
  salt: '',
  kind: 'generate',
  appRelPath: 'apps/a',
  env: [
    { name: 'A', value: '1' },
    { name: 'B', value: '2' },
  ],
  ignoreEnv: new Set(),
  contentDigest: 'tree',
};

test('every part of the key changes it', () => {
  const k = cacheKey(base);
  assert.match(k, /^[0-9a-f]{64}$/);
  const variants: Partial<CacheKeyInput>[] = [
    { plugin: 'helm-v2' },
    { specDigest: 'spec2' },
    { salt: 'image:1.2' },
    { kind: 'match' },
    { appRelPath: 'apps/b' },
    { env: [{ name: 'A', value: '1' }] },
    { env: [{ name: 'A', value: '1' }, { name: 'B', value: '3' }] },
    { contentDigest: 'tree2' },
  ];
  for (const v of variants) assert.notEqual(cacheKey({ ...base, ...v }), k, JSON.stringify(v));
});

test('the encoding is unambiguous: moving text between parts changes the key', () => {
  assert.notEqual(cacheKey({ ...base, plugin: 'ab', specDigest: 'c' }), cacheKey({ ...base, plugin: 'a', specDigest: 'bc' }));
  assert.notEqual(
    cacheKey({ ...base, env: [{ name: 'A', value: '1,B=2' }] }),
    cacheKey({ ...base, env: [{ name: 'A', value: '1' }, { name: 'B', value: '2' }] }),
  );
});

test('the env counts as the command sees it: order-free, last duplicate wins, empty names dropped', () => {
  const k = cacheKey(base);
  assert.equal(cacheKey({ ...base, env: [...base.env].reverse() }), k);
  assert.equal(cacheKey({ ...base, env: [{ name: 'A', value: 'old' }, ...base.env] }), k);
  assert.equal(cacheKey({ ...base, env: [...base.env, { name: '', value: 'x' }] }), k);
  // `A=B` + `C` is the process env entry `A=B=C`, the same as name `A` with value `B=C`.
  assert.equal(
    cacheKey({ ...base, env: [{ name: 'A=B', value: 'C' }] }),
    cacheKey({ ...base, env: [{ name: 'A', value: 'B=C' }] }),
  );
});

test('names in CMP_OFFLOAD_CACHE_IGNORE_ENV are left out', () => {
  const ignoring = { ...base, ignoreEnv: new Set(['TRACE_ID']) };
  assert.equal(cacheKey({ ...ignoring, env: [...base.env, { name: 'TRACE_ID', value: 'x' }] }), cacheKey(ignoring));
  assert.equal(cacheKey(ignoring), cacheKey(base));
});

test('the memory cache is an LRU bounded by size, with a TTL', () => {
  let now = 0;
  const result = (s: string) => ({ kind: 'generate' as const, manifests: [s] });
  const cache = new MemoryCache(400, 1000, () => now);
  cache.set('a', result('x'.repeat(50)));
  cache.set('b', result('y'.repeat(50)));
  assert.ok(cache.get('a'), 'a is fresh and becomes most recent');
  cache.set('c', result('z'.repeat(50)));
  assert.equal(cache.get('b'), undefined, 'least recently used entry evicted');
  assert.deepEqual(cache.get('a'), result('x'.repeat(50)));
  now = 1001;
  assert.equal(cache.get('a'), undefined, 'expired');
  cache.set('huge', result('h'.repeat(1000)));
  assert.equal(cache.get('huge'), undefined, 'larger than the whole cache: not kept');
  assert.ok(cache.stats().bytes <= 400);
});
