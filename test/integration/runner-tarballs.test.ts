import { createHash, randomBytes } from 'node:crypto';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DATA_FRAME_SEND } from '../../runner/protocol.js';
import { startDistributed } from '../helpers/distributed.js';
import { chunksOf, openCmpClient, repoMetadata } from '../helpers/grpc-client.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { tarballOf } from '../helpers/repo.js';

/**
 * The worker hands the runner a tarball up to DATA_FRAME_SEND bytes with the request header in
 * one write, and a larger one as a stream of DATA frames: the runner gets every byte either way.
 * The plugin prints the sha256 of the file it finds.
 */
const SPEC = `generate:
  command: [sh, -c, 'printf "kind: ConfigMap\\nmetadata:\\n  name: sum\\ndata:\\n  sum: %s\\n" "$(sha256sum blob.bin | cut -c1-64)"']`;

test('tarballs below, at and above the one-write size, and of several MiB, reach the runner whole', async () => {
  const d = await startDistributed({ pluginYaml: pluginYaml('sums', SPEC), socketName: 'sums.sock', workers: 1, env: { CMP_OFFLOAD_CACHE: 'off' } });
  const client = openCmpClient(d.proxy.socketPath);
  try {
    // Random bytes do not compress: the tarball is about as large as the file.
    for (const bytes of [0, 1_000, DATA_FRAME_SEND - 2_048, DATA_FRAME_SEND + 10_000, 3 * 1024 * 1024]) {
      // tarballOf writes text: random latin1 characters, stored as UTF-8 (about 1.5 bytes each).
      const text = randomBytes(Math.round(bytes / 1.5)).toString('latin1');
      const blob = Buffer.from(text, 'utf8');
      const tgz = await tarballOf({ 'blob.bin': text });
      const outcome = await client.generate({ metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 64 * 1024), timeoutMs: 60_000 });
      const sum = createHash('sha256').update(blob).digest('hex');
      assert.deepEqual(outcome, { value: { manifests: [JSON.stringify({ data: { sum }, kind: 'ConfigMap', metadata: { name: 'sum' } })], sourceType: '' } }, `${bytes} bytes (tarball ${tgz.length})`);
    }
  } finally {
    client.close();
    await d.stop();
  }
});
