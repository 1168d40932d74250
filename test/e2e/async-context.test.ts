import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { chunksOf, openCmpClient, repoMetadata } from '../helpers/grpc-client.js';
import { fixturePath } from '../helpers/paths.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { startProxy } from '../helpers/proxy-process.js';
import { buildTgz } from '../helpers/tar-builder.js';

/**
 * The proxy never enters an AsyncLocalStorage while it serves requests: once one is entered,
 * Node 20 runs async-hook bookkeeping for every promise and tick of the process, and grpc-js
 * makes some for every 1 KiB message of a repo stream (docs/performance.md, storm-large). The request trace
 * travels in the request's Ctx instead. A probe preloaded into the proxy records any entry.
 */

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-als-'));
after(() => fs.rmSync(work, { recursive: true, force: true }));

test('a standalone proxy answers all three RPCs, hits and misses, without entering an AsyncLocalStorage', async () => {
  const probe = path.join(work, 'entries');
  const proxy = await startProxy({
    pluginYaml: pluginYaml('als', 'discover:\n  fileName: "a.yaml"\ngenerate:\n  command: [sh, -c, "cat a.yaml"]'),
    socketName: 'als.sock',
    env: {
      NODE_OPTIONS: `--import=${pathToFileURL(fixturePath('e2e', 'async-storage-probe.mjs')).href}`,
      ALS_PROBE_FILE: probe,
      CMP_OFFLOAD_HTTP_ADDR: 'off',
    },
  });
  const client = openCmpClient(proxy.socketPath);
  try {
    const tgz = buildTgz([{ name: 'a.yaml', content: 'a: 1\n' }]);
    const call = () => ({ metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 1024) });
    for (let i = 0; i < 2; i++) {
      assert.ok('value' in (await client.generate(call())));
      assert.ok('value' in (await client.match(call())));
      assert.ok('value' in (await client.params(call())));
    }
  } finally {
    client.close();
    await proxy.stop();
  }
  assert.equal(fs.existsSync(probe) ? fs.readFileSync(probe, 'utf8') : '', '');
});
