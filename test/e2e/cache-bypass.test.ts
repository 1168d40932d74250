import fs from 'node:fs';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { countRuns } from '../helpers/monorepo.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { tarballOf } from '../helpers/repo.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { MODES, startCmp } from './harness.js';

/**
 * The per-app way out of the cache (docs/traced-cache.md#output-cache: Hard Refresh does not reach a CMP): an
 * Application whose plugin env sets CMP_OFFLOAD_CACHE=off (the request env
 * ARGOCD_ENV_CMP_OFFLOAD_CACHE=off) is never served from the cache and its result is not stored.
 * Runs are counted by the plugin (a line per run in a counter file outside the tree).
 */
const work = pluginWritableTempDir('cmp-cache-bypass-');
after(() => fs.rmSync(work, { recursive: true, force: true }));

const COUNTING = pluginYaml(
  'bypass',
  `generate:
  command: [sh, -c]
  args:
    - |
      echo "$TAG" >> "$COUNTER"
      printf '{"tag":"%s"}\\n' "$TAG"`,
);

/** The cache entries (`<prefix>:out:…`) in a distributed server's Redis. */
async function cacheEntries(redisUrl: string): Promise<string[]> {
  const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    return (await redis.keys('*:out:*')).sort();
  } finally {
    redis.disconnect();
  }
}

for (const mode of MODES) {
  describe(`per-app cache bypass: ARGOCD_ENV_CMP_OFFLOAD_CACHE=off (${mode})`, () => {
    test('not served from the cache, not stored in it; other values keep the cache', async () => {
      // The bypass entry is left out of the key here, so that a bypassing request and an ordinary
      // one ask for the same entry: a hit or a miss across them shows what was served or stored.
      const server = await startCmp(mode, {
        pluginYaml: COUNTING,
        socketName: 'bypass.sock',
        env: { CMP_OFFLOAD_CACHE_IGNORE_ENV: 'ARGOCD_ENV_CMP_OFFLOAD_CACHE' },
      });
      const client: CmpTestClient = openCmpClient(server.socketPath);
      try {
        const counter = path.join(work, `counter-${mode}`);
        const runs = (tag: string) => countRuns(counter).filter(l => l === tag).length;
        const tgz = await tarballOf({ 'f.txt': 'bypass' });
        const ask = async (tag: string, bypass?: string) => {
          const env = [
            { name: 'COUNTER', value: counter },
            { name: 'TAG', value: tag },
          ];
          if (bypass !== undefined) env.push({ name: 'ARGOCD_ENV_CMP_OFFLOAD_CACHE', value: bypass });
          const out = await client.generate({ metadata: repoMetadata(tgz, { env }), chunks: chunksOf(tgz, 64 * 1024) });
          assert.ok('value' in out, `${tag}: ${JSON.stringify(out)}`);
          assert.equal(JSON.parse(out.value.manifests[0]!).tag, tag);
        };

        await ask('a');
        await ask('a');
        assert.equal(runs('a'), 1, 'precondition: an ordinary request is a hit the second time');
        await ask('a', 'off');
        assert.equal(runs('a'), 2, 'off: the cached entry is not served');
        await ask('a', 'OFF');
        assert.equal(runs('a'), 3, 'OFF (any case): not served either');
        await ask('a', 'on');
        await ask('a', '');
        assert.equal(runs('a'), 3, 'another value: served from the cache');

        // a's entries (with the traced cache, its whole-tree entry and its traced one) and nothing of b's.
        const entriesOfA = mode === 'distributed' ? await cacheEntries(server.redisUrl!) : [];
        await ask('b', 'off');
        assert.equal(runs('b'), 1);
        if (mode === 'distributed') assert.deepEqual(await cacheEntries(server.redisUrl!), entriesOfA, 'the bypassing run stored no entry in Redis');
        if (mode === 'distributed') assert.ok(entriesOfA.length >= 1, 'a\'s entry is in Redis');
        await ask('b');
        assert.equal(runs('b'), 2, 'the bypassing run stored nothing: an ordinary request misses');
        await ask('b');
        assert.equal(runs('b'), 2, 'that ordinary run was stored');
      } finally {
        client.close();
        await server.stop();
      }
    });
  });
}
