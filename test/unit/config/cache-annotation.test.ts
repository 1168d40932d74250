import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CACHE_ANNOTATION, cacheMode, compileOptions, forPlugin, OptionsError } from '../../../cmp/config/options.js';

const modeOf = (env: string | undefined, annotation: string | undefined) =>
  cacheMode(forPlugin(compileOptions(env === undefined ? {} : { CMP_OFFLOAD_CACHE: env }), annotation === undefined ? {} : { [CACHE_ANNOTATION]: annotation }));

test('the plugin.yaml annotation cmp-offload.io/cache lowers CMP_OFFLOAD_CACHE for its plugin, never raises it', () => {
  assert.equal(CACHE_ANNOTATION, 'cmp-offload.io/cache');
  // [CMP_OFFLOAD_CACHE, annotation, what applies]
  const cases: Array<[string, string | undefined, string]> = [
    ['traced', undefined, 'traced'],
    ['traced', 'traced', 'traced'],
    ['traced', 'on', 'on'],
    ['traced', 'off', 'off'],
    ['on', 'traced', 'on'],
    ['on', 'off', 'off'],
    ['off', 'traced', 'off'],
    ['off', 'on', 'off'],
  ];
  for (const [env, annotation, expected] of cases) assert.equal(modeOf(env, annotation), expected, `CMP_OFFLOAD_CACHE=${env}, annotation ${annotation}`);
});

test('options the annotation leaves alone are the same object; lowered ones stay frozen, with every other setting kept', () => {
  const options = compileOptions({ CMP_OFFLOAD_CACHE: 'traced', CMP_OFFLOAD_CACHE_SALT: 'salt' });
  assert.equal(forPlugin(options, {}), options);
  assert.equal(forPlugin(options, { other: 'on' }), options);
  const lowered = forPlugin(options, { [CACHE_ANNOTATION]: 'on' });
  assert.deepEqual([lowered.cache.enabled, lowered.cache.traced, lowered.cache.salt], [true, false, 'salt']);
  assert.ok(Object.isFrozen(lowered) && Object.isFrozen(lowered.cache));
  assert.equal(lowered.concurrency, options.concurrency);
});

test('an annotation value other than off, on or traced stops the process with a message naming the annotation', () => {
  for (const bad of ['On', 'true', '', 'disabled']) {
    assert.throws(
      () => forPlugin(compileOptions({}), { [CACHE_ANNOTATION]: bad }),
      (err: unknown) => err instanceof OptionsError && err.message === `invalid value ${JSON.stringify(bad)} for the plugin.yaml annotation cmp-offload.io/cache: expected one of off, on, traced`,
    );
  }
});

test('CMP_OFFLOAD_CACHE defaults to traced; the annotation lowers the default like an explicit setting', () => {
  assert.equal(modeOf(undefined, undefined), 'traced');
  assert.equal(modeOf(undefined, 'on'), 'on');
  assert.equal(modeOf(undefined, 'off'), 'off');
});
