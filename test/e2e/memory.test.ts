import { createHash, randomFillSync } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import zlib from 'node:zlib';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chunksOf, openCmpClient, repoMetadata } from '../helpers/grpc-client.js';
import { startProxy } from '../helpers/proxy-process.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { treeRssBytes } from '../helpers/process-tree.js';
import { buildTgz } from '../helpers/tar-builder.js';

const MiB = 1024 * 1024;
// 256 MiB: 2.5× the bound, so a proxy that held the tarball would fail; the bench measures 500 MiB.
const SIZE = Number(process.env.CMP_OFFLOAD_MEMORY_TEST_MIB ?? 256) * MiB;

/** A tar with one large file of incompressible content, then gzip: written to disk, never held in memory. */
async function writeLargeTgz(file: string, contentBytes: number): Promise<string> {
  const header = Buffer.alloc(512);
  header.write('big.bin', 0);
  header.write('0000644\0', 100);
  header.write('0000000\0', 108);
  header.write('0000000\0', 116);
  header.write(contentBytes.toString(8).padStart(11, '0') + '\0', 124);
  header.write('14540000000\0', 136);
  header.write('        ', 148);
  header.write('0', 156);
  header.write('ustar\0', 257);
  header.write('00', 263);
  let sum = 0;
  for (const b of header) sum += b;
  header.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
  async function* tar() {
    yield header;
    const block = Buffer.alloc(MiB);
    for (let left = contentBytes; left > 0; left -= MiB) {
      randomFillSync(block);
      yield left >= MiB ? block : block.subarray(0, left);
    }
    yield Buffer.alloc(512 - (contentBytes % 512 || 512));
    yield Buffer.alloc(1024);
  }
  const hash = createHash('sha256');
  const gzip = zlib.createGzip({ level: 1 });
  gzip.on('data', (b: Buffer) => hash.update(b));
  await pipeline(Readable.from(tar()), gzip, fs.createWriteStream(file));
  return hash.digest('hex');
}


test(`ingesting a ${SIZE / MiB} MiB tarball grows the proxy's RSS by less than 100 MiB`, { timeout: 300_000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-mem-'));
  const tgz = path.join(dir, 'big.tgz');
  const proxy = await startProxy({
    pluginYaml: pluginYaml('mem', 'generate: {command: [sh, -c, "wc -c < big.bin | sed \'s/^/size: /\'"]}'),
    socketName: 'mem.sock',
  });
  const client = openCmpClient(proxy.socketPath);
  try {
    const checksum = await writeLargeTgz(tgz, SIZE);
    const size = fs.statSync(tgz).size;
    // Warm up the code paths once so that the baseline includes what any request loads: a small
    // app through ingest, extraction (its worker thread starts on the first one) and the plugin.
    await client.check();
    const small = buildTgz([{ name: 'big.bin', content: Buffer.alloc(4096, 1) }]);
    const warm = await client.generate({ metadata: repoMetadata(small, { appName: 'mem' }), chunks: chunksOf(small, 1024) });
    assert.deepEqual(warm, { value: { manifests: ['{"size":4096}'], sourceType: '' } });
    // Every process of the proxy (a coordinator and its ingest processes with CMP_OFFLOAD_PROXY_PROCESSES > 1).
    const baseline = treeRssBytes(proxy.proc.pid!);
    let peak = baseline;
    const sampler = setInterval(() => (peak = Math.max(peak, treeRssBytes(proxy.proc.pid!))), 50);
    async function* messages() {
      yield { metadata: { appName: 'mem', appRelPath: '.', checksum, size, env: [] } };
      // 64 KiB chunks keep the test short; ingest handles any chunk size the same way.
      for await (const chunk of fs.createReadStream(tgz, { highWaterMark: 64 * 1024 })) yield { file: { chunk: chunk as Buffer } };
    }
    const { callClientStream } = await import('../../cli/client-stream.js');
    const res = await callClientStream(client.raw, 'generateManifest', messages(), {});
    clearInterval(sampler);
    assert.deepEqual(res, { value: { manifests: [`{"size":${SIZE}}`], sourceType: '' } });
    const growth = peak - baseline;
    process.stdout.write(`# proxy RSS baseline ${(baseline / MiB).toFixed(1)} MiB, peak ${(peak / MiB).toFixed(1)} MiB, growth ${(growth / MiB).toFixed(1)} MiB\n`);
    assert.ok(growth < 100 * MiB, `RSS grew by ${(growth / MiB).toFixed(1)} MiB`);
  } finally {
    client.close();
    await proxy.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
