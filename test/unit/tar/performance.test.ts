import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomFillSync } from 'node:crypto';
import { once } from 'node:events';
import zlib from 'node:zlib';
import { TreeIndexer } from '../../../cmp/tar/tree-index.js';
import { headerBlock } from '../../helpers/tar-builder.js';
import { NO_LIMITS } from './helpers.js';

const MiB = 1 << 20;

test('indexing a 256 MiB gzip stream in 1 KiB writes keeps RSS growth under 100 MiB', async t => {
  const target = 256 * MiB; // 2.5× the bound: an indexer that buffered the stream would fail
  const random = randomFillSync(Buffer.allocUnsafe(4 * MiB));
  const text = Buffer.from('apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n'.repeat(20000));
  const indexer = new TreeIndexer(NO_LIMITS);
  const gz = zlib.createGzip({ level: 1 });
  let compressed = 0;
  let peak = 0;
  const started = Date.now();
  const baseline = process.memoryUsage().rss;
  gz.on('data', (chunk: Buffer) => {
    for (let i = 0; i < chunk.length; i += 1024) indexer.write(chunk.subarray(i, i + 1024));
    compressed += chunk.length;
    peak = Math.max(peak, process.memoryUsage().rss);
  });
  const write = async (b: Buffer) => {
    if (!gz.write(b)) await once(gz, 'drain');
  };
  let n = 0;
  while (compressed < target) {
    if (n === 50 && (Date.now() - started) * (target / Math.max(compressed, 1)) > 60_000) {
      t.skip(`would take over 60 s on this machine (${compressed} bytes after ${Date.now() - started} ms)`);
      gz.destroy();
      return;
    }
    // Mixed: incompressible files and compressible YAML-ish ones.
    const content = n % 4 === 3 ? text : random.subarray((n * 4099) % MiB, (n * 4099) % MiB + 3 * MiB);
    await write(headerBlock({ name: `dir${n % 97}/file-${n}.bin`, typeflag: '0', size: content.length }));
    await write(content);
    await write(Buffer.alloc((512 - (content.length % 512)) % 512));
    n++;
  }
  await write(Buffer.alloc(1024));
  gz.end();
  await once(gz, 'end');
  const idx = await indexer.end();
  const growth = (peak - baseline) / MiB;
  t.diagnostic(`${(compressed / MiB).toFixed(0)} MiB gzip, ${n} files, RSS growth ${growth.toFixed(1)} MiB, ${Date.now() - started} ms`);
  assert.equal(idx.entries.size, n + 97);
  assert.ok(growth < 100, `RSS grew by ${growth.toFixed(1)} MiB`);
});
