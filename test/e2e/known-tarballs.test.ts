import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { scrape } from '../helpers/metrics.js';
import { fixturePath } from '../helpers/paths.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { freePort } from '../helpers/redis-server.js';
import { buildTgz, type TarEntry } from '../helpers/tar-builder.js';
import { eventually, leftovers, MODES, startCmp, type CmpServer } from './harness.js';

/**
 * Known tarballs (issue 12): the repo-server sends the whole repository for every Application,
 * so the proxy remembers the tree index of each verified tarball (CMP_OFFLOAD_INDEX_MEMO_BYTES)
 * and only hashes a tarball it knows. Against the real proxy on its real unix socket, in 1 KiB
 * chunks as the repo-server sends them; the memo is observed through the proxy's /metrics.
 */

const LIST_TREE = [process.execPath, fixturePath('e2e', 'list-tree.mjs')];
const CHECKSUM_ERROR = 'generate manifest error receiving stream: error receiving tgz file: file checksum validation error';
/** Small enough for a storm of a dozen small trees to overflow it many times. */
const MEMO_BYTES = 16 * 1024;

/** A tree of `files` files named after `tag` (about 500 bytes of index each). */
function tree(tag: string, files = 4): TarEntry[] {
  return [
    { name: 'app', type: 'dir' },
    ...Array.from({ length: files }, (_, i) => ({ name: `app/${tag}-${i}.yaml`, content: `tag: ${tag}\nfile: ${i}\n` })),
  ];
}

for (const mode of MODES) {
  describe(`known tarballs are only hashed (${mode})`, () => {
    let server: CmpServer;
    let client: CmpTestClient;
    let port: number;

    before(async () => {
      port = await freePort();
      server = await startCmp(mode, {
        pluginYaml: pluginYaml('known', `generate:\n  command: ${JSON.stringify(LIST_TREE)}`),
        socketName: 'known.sock',
        // Cache off: every request runs, so every answer comes from an extraction of the tarball.
        env: { CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_INDEX_MEMO_BYTES: String(MEMO_BYTES), CMP_OFFLOAD_HTTP_ADDR: 'off' },
        proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}` },
      });
      client = openCmpClient(server.socketPath);
      // The ops HTTP server starts in the background, after the socket.
      const end = Date.now() + 10_000;
      while (!(await scrape(port).then(() => true, () => false))) {
        assert.ok(Date.now() < end, 'the proxy never served /metrics');
        await new Promise(r => setTimeout(r, 50));
      }
    });
    after(async () => {
      client?.close();
      await server?.stop();
    });
    afterEach(async () => {
      await eventually(() => leftovers(server).length === 0, 5_000, `empty work roots (left: ${leftovers(server).join(', ')})`);
    });

    async function memo() {
      const m = await scrape(port);
      return {
        hit: m.get('cmp_offload_index_memo_lookups_total{result="hit"}') ?? 0,
        miss: m.get('cmp_offload_index_memo_lookups_total{result="miss"}') ?? 0,
        bytes: m.get('cmp_offload_index_memo_bytes') ?? 0,
        spooled: m.get('cmp_offload_spooled_tarballs') ?? 0,
      };
    }

    /** The tree the plugin saw, from a GenerateManifest of `tgz` sent in 1 KiB chunks. */
    async function listing(tgz: Buffer, metadata = repoMetadata(tgz)) {
      const out = await client.generate({ metadata, chunks: chunksOf(tgz, 1024) });
      assert.ok('value' in out, JSON.stringify(out));
      return JSON.parse(out.value.manifests[0]!).entries as Record<string, string>;
    }

    test('a tarball sent again is answered alike from the remembered index, also by requests at once', async () => {
      const tgz = buildTgz(tree('same', 20));
      const before = await memo();
      const first = await listing(tgz);
      assert.equal(first['app/same-19.yaml'], 'file 0644 tag: same\nfile: 19\n');
      const afterFirst = await memo();
      assert.deepEqual([afterFirst.hit - before.hit, afterFirst.miss - before.miss], [0, 1]);
      assert.deepEqual(await listing(tgz), first);
      // At once: the later ones share the copy the first one spooled (or spool it again).
      const together = await Promise.all(Array.from({ length: 5 }, () => listing(tgz)));
      for (const t of together) assert.deepEqual(t, first);
      const now = await memo();
      assert.deepEqual([now.hit - afterFirst.hit, now.miss - afterFirst.miss], [6, 0]);
      assert.equal(now.spooled, 0, 'a shared copy outlived its requests');
    });

    test('a known checksum over other bytes gets Argo checksum error and leaves the memo as it was', async () => {
      const tgz = buildTgz(tree('good'));
      const good = await listing(tgz);
      const meta = repoMetadata(tgz);
      const corrupt = Buffer.from(tgz);
      corrupt[Math.floor(corrupt.length / 2)]! ^= 0x01;
      const before = await memo();
      // One byte changed, the checksum of the good bytes claimed: alone, then beside a good request.
      assert.deepEqual(await client.generate({ metadata: meta, chunks: chunksOf(corrupt, 1024) }), { code: Status.UNKNOWN, details: CHECKSUM_ERROR });
      const [bad, ok] = await Promise.all([client.generate({ metadata: meta, chunks: chunksOf(corrupt, 1024) }), listing(tgz)]);
      assert.deepEqual(bad, { code: Status.UNKNOWN, details: CHECKSUM_ERROR });
      assert.deepEqual(ok, good);
      // Another valid tarball claiming the known checksum is refused too, and is its own tree under its own.
      const other = buildTgz(tree('other'));
      assert.deepEqual(await client.generate({ metadata: meta, chunks: chunksOf(other, 1024) }), { code: Status.UNKNOWN, details: CHECKSUM_ERROR });
      const after = await memo();
      assert.deepEqual([after.hit - before.hit, after.miss - before.miss], [1, 0], 'only the good request counted, as a hit');
      assert.equal((await listing(other))['app/other-0.yaml'], 'file 0644 tag: other\nfile: 0\n');
      assert.deepEqual(await listing(tgz), good);
      const last = await memo();
      assert.deepEqual([last.hit - after.hit, last.miss - after.miss], [1, 1]);
    });

    test('a storm of distinct tarballs keeps the memo within CMP_OFFLOAD_INDEX_MEMO_BYTES; the oldest is forgotten', async () => {
      const tarballs = Array.from({ length: 24 }, (_, i) => buildTgz(tree(`storm${i}`, 4 + (i % 5))));
      const before = await memo();
      for (let i = 0; i < tarballs.length; i += 4) {
        await Promise.all(tarballs.slice(i, i + 4).map(t => listing(t)));
        const m = await memo();
        assert.ok(m.bytes > 0 && m.bytes <= MEMO_BYTES, `memo at ${m.bytes} bytes`);
      }
      const marker = buildTgz(tree('marker'));
      await listing(marker);
      // A tree whose index alone is over the bound is not remembered at all.
      const huge = buildTgz(tree('huge', 200));
      await listing(huge);
      const afterStorm = await memo();
      assert.ok(afterStorm.bytes <= MEMO_BYTES, `memo at ${afterStorm.bytes} bytes`);
      assert.deepEqual([afterStorm.hit - before.hit, afterStorm.miss - before.miss], [0, tarballs.length + 2]);
      await listing(huge);
      await listing(marker);
      await listing(tarballs[0]!);
      const last = await memo();
      assert.deepEqual([last.hit - afterStorm.hit, last.miss - afterStorm.miss], [1, 2], 'the marker is known, the huge tree and the first of the storm are not');
    });

    // Distributed mode only (defined there, not skipped elsewhere: npm test reports no skips).
    if (mode === 'distributed') test('distributed: a known tarball is not uploaded again, its blob only gets its TTL refreshed', async () => {
      const tgz = buildTgz(tree('blob'));
      await listing(tgz);
      // Keyspace events of the blob key (this suite's own Redis): an upload ends in a RENAME onto it.
      const commands = new Redis(server.redisUrl!);
      const events = new Redis(server.redisUrl!);
      try {
        await commands.config('SET', 'notify-keyspace-events', 'Kg$');
        const seen: string[] = [];
        events.on('message', (_channel: string, event: string) => seen.push(event));
        await events.subscribe(`__keyspace@0__:{cmp-offload}:blob:${repoMetadata(tgz).checksum}`);
        await listing(tgz);
        await listing(tgz);
        await eventually(() => seen.length >= 2, 5_000, 'two events on the blob key');
        assert.deepEqual([...new Set(seen)], ['expire'], `events on the blob key: ${seen.join(', ')}`);
      } finally {
        commands.disconnect();
        events.disconnect();
      }
    });
  });
}
