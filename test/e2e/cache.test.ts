import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { makeRepo, packRepo } from '../helpers/repo.js';
import { MODES, startCmp, type CmpServer } from './harness.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';

/**
 * The output cache (docs/traced-cache.md#output-cache): keyed by the tree's content (not the tarball bytes), the
 * plugin, the app path and the env; a hit returns the fresh run's exact bytes; identical
 * requests in flight run once. Every execution appends a line to a counter file.
 */
const counterDir = pluginWritableTempDir('cmp-cache-');
after(() => fs.rmSync(counterDir, { recursive: true, force: true }));

const GENERATE = `generate:
  command: [sh, -c]
  args: ["echo run >> $COUNTER; test -f f.txt || exit 4; sleep \${SLEEP:-0}; printf '{\\"z\\": 1.50, \\"a\\": \\"%s\\"}\\\\n---\\\\nk: v\\\\n' \\"$(cat f.txt)\\""]`;

function runs(counter: string): number {
  return fs.existsSync(counter) ? fs.readFileSync(counter, 'utf8').split('\n').filter(Boolean).length : 0;
}

function request(tgz: Buffer, counter: string, extra: Array<{ name: string; value: string }> = [], appRelPath = '.') {
  return {
    metadata: repoMetadata(tgz, { appRelPath, env: [{ name: 'COUNTER', value: counter }, ...extra] }),
    chunks: chunksOf(tgz, 1024),
  };
}

for (const mode of MODES) {
  describe(`output cache (${mode})`, () => {
    let server: CmpServer;
    let client: CmpTestClient;
    let off: CmpServer;
    let offClient: CmpTestClient;
    before(async () => {
      [server, off] = await Promise.all([
        startCmp(mode, { pluginYaml: pluginYaml('cached', GENERATE), socketName: 'cached.sock', env: { CMP_OFFLOAD_CACHE_IGNORE_ENV: 'IGNORED' } }),
        startCmp(mode, { pluginYaml: pluginYaml('uncached', GENERATE), socketName: 'uncached.sock', env: { CMP_OFFLOAD_CACHE: 'off' } }),
      ]);
      client = openCmpClient(server.socketPath);
      offClient = openCmpClient(off.socketPath);
    });
    after(async () => {
      client.close();
      offClient.close();
      await Promise.all([server.stop(), off.stop()]);
    });

    test('a repeated request is answered from the cache with the exact bytes of the fresh run', async () => {
      const counter = path.join(counterDir, `repeat-${mode}`);
      const dir = makeRepo({ 'f.txt': 'one' });
      const tgz = await packRepo(dir);
      const fresh = await client.generate(request(tgz, counter));
      assert.deepEqual(fresh, { value: { manifests: ['{"z": 1.50, "a": "one"}', '{"k":"v"}'], sourceType: '' } });
      const again = await client.generate(request(tgz, counter));
      assert.deepEqual(again, fresh);
      assert.equal(runs(counter), 1);
      fs.rmSync(dir, { recursive: true, force: true });
    });

    test('the key follows the tree content, not the tarball bytes: new mtimes hit, a changed file misses', async () => {
      const counter = path.join(counterDir, `content-${mode}`);
      const dir = makeRepo({ 'f.txt': 'two', 'other/g.txt': 'g' });
      const first = await packRepo(dir);
      await client.generate(request(first, counter));
      // A fresh checkout: same content, new mtimes, hence a different tarball and checksum.
      const later = new Date(Date.now() + 3_600_000);
      for (const f of ['f.txt', 'other/g.txt', 'other', '.']) fs.utimesSync(path.join(dir, f), later, later);
      const touched = await packRepo(dir);
      assert.notDeepEqual(touched, first);
      await client.generate(request(touched, counter));
      assert.equal(runs(counter), 1, 'same content hits');
      fs.writeFileSync(path.join(dir, 'f.txt'), 'three');
      const changed = await client.generate(request(await packRepo(dir), counter));
      assert.ok('value' in changed);
      assert.equal(changed.value.manifests[0], '{"z": 1.50, "a": "three"}');
      assert.equal(runs(counter), 2, 'changed content misses');
      fs.rmSync(dir, { recursive: true, force: true });
    });

    test('env and app path are part of the key, except names in CMP_OFFLOAD_CACHE_IGNORE_ENV', async () => {
      const counter = path.join(counterDir, `env-${mode}`);
      const dir = makeRepo({ 'f.txt': 'four', 'sub/f.txt': 'sub' });
      const tgz = await packRepo(dir);
      await client.generate(request(tgz, counter, [{ name: 'A', value: '1' }]));
      await client.generate(request(tgz, counter, [{ name: 'A', value: '1' }, { name: 'IGNORED', value: 'x' }]));
      assert.equal(runs(counter), 1);
      await client.generate(request(tgz, counter, [{ name: 'A', value: '2' }]));
      assert.equal(runs(counter), 2);
      await client.generate(request(tgz, counter, [{ name: 'A', value: '2' }], 'sub'));
      assert.equal(runs(counter), 3);
      fs.rmSync(dir, { recursive: true, force: true });
    });

    test('identical concurrent requests run once and all get the answer', async () => {
      const counter = path.join(counterDir, `coalesce-${mode}`);
      const dir = makeRepo({ 'f.txt': 'five' });
      const tgz = await packRepo(dir);
      const results = await Promise.all(
        Array.from({ length: 5 }, () => client.generate(request(tgz, counter, [{ name: 'SLEEP', value: '1' }]))),
      );
      for (const r of results) assert.deepEqual(r, { value: { manifests: ['{"z": 1.50, "a": "five"}', '{"k":"v"}'], sourceType: '' } });
      assert.equal(runs(counter), 1);
      fs.rmSync(dir, { recursive: true, force: true });
    });

    test('failures are not cached', async () => {
      const counter = path.join(counterDir, `failure-${mode}`);
      const dir = makeRepo({ 'g.txt': 'no f.txt here' });
      const tgz = await packRepo(dir);
      const first = await client.generate(request(tgz, counter));
      assert.ok('code' in first);
      const second = await client.generate(request(tgz, counter));
      assert.deepEqual(second, first);
      assert.equal(runs(counter), 2);
      fs.rmSync(dir, { recursive: true, force: true });
    });

    test('with CMP_OFFLOAD_CACHE=off every request runs', async () => {
      const counter = path.join(counterDir, `off-${mode}`);
      const dir = makeRepo({ 'f.txt': 'six' });
      const tgz = await packRepo(dir);
      const a = await offClient.generate(request(tgz, counter));
      const b = await offClient.generate(request(tgz, counter));
      assert.deepEqual(a, b);
      assert.equal(runs(counter), 2);
      fs.rmSync(dir, { recursive: true, force: true });
    });
  });
}
