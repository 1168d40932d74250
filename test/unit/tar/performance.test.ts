import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { extractTgz } from '../../../cmp/tar/extract.js';
import { TreeIndexer } from '../../../cmp/tar/tree-index.js';
import { buildTgz, headerBlock, type TarEntry } from '../../helpers/tar-builder.js';
import { NO_LIMITS, withTmp } from './helpers.js';

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

test('extracting a 20k-file tree: time against GNU tar -xzf', async t => {
  await withTmp(async dir => {
    const entries: TarEntry[] = [];
    for (let i = 0; i < 20_000; i++) {
      const size = 200 + ((i * 7919) % 7000);
      entries.push({ name: `apps/app-${i % 200}/sub-${i % 7}/file-${i}.yaml`, content: Buffer.alloc(size, `k${i}: v\n`) });
    }
    const tgzPath = path.join(dir, 'tree.tgz');
    fs.writeFileSync(tgzPath, buildTgz(entries));
    // Warm the worker pool so start-up is not measured.
    fs.mkdirSync(path.join(dir, 'warm'));
    await extractTgz(tgzPath, path.join(dir, 'warm'), { preserveFileMode: false, ...NO_LIMITS });
    // Best of 3, alternated: CI's other lane shares the two cores, and a busy moment can land on
    // either side (one run measured 4.00x; quiet runs are near 1.5x).
    let oursMs = Infinity;
    let gnuMs = Infinity;
    for (let i = 0; i < 3; i++) {
      const ours = path.join(dir, `ours-${i}`);
      const gnu = path.join(dir, `gnu-${i}`);
      fs.mkdirSync(ours);
      fs.mkdirSync(gnu);
      let t0 = performance.now();
      const res = await extractTgz(tgzPath, ours, { preserveFileMode: false, ...NO_LIMITS });
      oursMs = Math.min(oursMs, performance.now() - t0);
      assert.equal(res.files, 20_000);
      t0 = performance.now();
      execFileSync('tar', ['-xzf', tgzPath, '-C', gnu]);
      gnuMs = Math.min(gnuMs, performance.now() - t0);
      fs.rmSync(ours, { recursive: true });
      fs.rmSync(gnu, { recursive: true });
    }
    const ratio = oursMs / gnuMs;
    t.diagnostic(`extractTgz ${oursMs.toFixed(0)} ms, tar -xzf ${gnuMs.toFixed(0)} ms, ratio ${ratio.toFixed(2)}`);
    // The target is 1.5x; the bound here only catches regressions without flaking on busy machines.
    assert.ok(ratio < 4, `extraction is ${ratio.toFixed(2)}x slower than GNU tar`);
  });
});
