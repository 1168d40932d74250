import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compileOptions } from '../../../cmp/config/options.js';
import { bypassesCache } from '../../../proxy/rpc/answer-request.js';

test('CMP_OFFLOAD_CACHE_BYPASS_ENV: default CMP_OFFLOAD_CACHE, i.e. the request env ARGOCD_ENV_CMP_OFFLOAD_CACHE', () => {
  assert.equal(compileOptions({}, {}).cache.bypassEnv, 'ARGOCD_ENV_CMP_OFFLOAD_CACHE');
  assert.equal(compileOptions({ CMP_OFFLOAD_CACHE_BYPASS_ENV: 'NO_CACHE' }, {}).cache.bypassEnv, 'ARGOCD_ENV_NO_CACHE');
  assert.throws(() => compileOptions({ CMP_OFFLOAD_CACHE_BYPASS_ENV: 'A=B' }, {}), /CMP_OFFLOAD_CACHE_BYPASS_ENV/);
});

test('bypassesCache: the last entry of the name decides; only off (any case)', () => {
  const N = 'ARGOCD_ENV_CMP_OFFLOAD_CACHE';
  assert.equal(bypassesCache([], N), false);
  assert.equal(bypassesCache([{ name: N, value: 'off' }], N), true);
  assert.equal(bypassesCache([{ name: N, value: 'Off' }], N), true);
  assert.equal(bypassesCache([{ name: N, value: 'on' }], N), false);
  assert.equal(bypassesCache([{ name: 'CMP_OFFLOAD_CACHE', value: 'off' }], N), false, 'without the ARGOCD_ENV_ prefix: not the plugin env entry');
  assert.equal(bypassesCache([{ name: N, value: 'off' }, { name: N, value: 'on' }], N), false);
  assert.equal(bypassesCache([{ name: N, value: 'on' }, { name: N, value: 'off' }], N), true);
  // Rendered as name=value like the command's env: a name holding `=` splits at the first one.
  assert.equal(bypassesCache([{ name: `${N}=off`, value: '' }], N), false);
  assert.equal(bypassesCache([{ name: N, value: 'off=x' }], N), false);
});
