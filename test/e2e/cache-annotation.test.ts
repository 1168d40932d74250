import fs from 'node:fs';
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { CACHE_ANNOTATION } from '../../cmp/config/options.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { unrelatedChange } from '../helpers/unrelated-change.js';
import { MODES } from './harness.js';

/**
 * The plugin-level opt-out of the traced cache: `cmp-offload.io/cache: on` in plugin.yaml's
 * metadata.annotations. Proxy, workers and runners read the same plugin.yaml, so in distributed
 * mode the workers stop recording too (no read records in Redis), not only the proxy's lookups.
 */
const work = pluginWritableTempDir('cmp-cache-annotation-');
after(() => fs.rmSync(work, { recursive: true, force: true }));

for (const mode of MODES) {
  describe(`plugin.yaml annotation ${CACHE_ANNOTATION} (${mode})`, () => {
    test('on: the plugin keeps the content cache under CMP_OFFLOAD_CACHE=traced; nothing is recorded or looked up by reads', async () => {
      const env = { CMP_OFFLOAD_CACHE: 'traced', ARGOCD_CMP_SERVER_LOGLEVEL: 'info' };
      const r = await unrelatedChange(mode, work, { env, annotations: { [CACHE_ANNOTATION]: 'on' }, workers: 1 });
      assert.deepEqual([r.runs, r.hit, r.miss, r.fallback, r.readsKeys], [2, 0, 0, 0, 0]);
      assert.match(r.stderr, /cache: on for this plugin \(its plugin.yaml annotation cmp-offload.io\/cache\)/);
    });

    test('without it, the same server records what the run read and reuses the answer', async () => {
      const r = await unrelatedChange(mode, work, { env: { CMP_OFFLOAD_CACHE: 'traced' }, workers: 1 });
      assert.deepEqual([r.runs, r.hit, r.miss, r.fallback], [1, 1, 1, 0]);
      assert.equal(r.readsKeys, mode === 'distributed' ? 1 : 0);
      assert.doesNotMatch(r.stderr, /for this plugin \(its plugin.yaml annotation/);
    });

    test('off: no cache for the plugin at all', async () => {
      const r = await unrelatedChange(mode, work, { env: { CMP_OFFLOAD_CACHE: 'traced' }, annotations: { [CACHE_ANNOTATION]: 'off' }, workers: 1 });
      assert.deepEqual([r.runs, r.hit, r.miss, r.fallback, r.readsKeys], [2, 0, 0, 0, 0]);
    });
  });
}
