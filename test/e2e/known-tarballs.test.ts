import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { scrape } from '../helpers/metrics.js';
import { assertOurError } from '../helpers/our-errors.js';
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

    test('a storm of 50 distinct tarballs keeps the memo within CMP_OFFLOAD_INDEX_MEMO_BYTES; the oldest is forgotten', async () => {
      // Issue 12's storm of 50 distinct tarballs (48, the marker and the huge one), small ones against a small bound.
      const tarballs = Array.from({ length: 48 }, (_, i) => buildTgz(tree(`storm${i}`, 4 + (i % 5))));
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
      // Over the 16 KiB a job carries inline, so that it travels as a blob.
      const tgz = buildTgz([...tree('blob'), { name: 'app/pad.bin', content: randomBytes(32 * 1024) }]);
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

for (const mode of MODES) {
  describe(`kept tarball copies: CMP_OFFLOAD_SPOOL_KEEP_BYTES (${mode})`, () => {
    /**
     * Room for three of the tarballs below: 300 KiB of random bytes each (as large gzipped), over
     * the 256 KiB receive buffer, since a smaller tarball stays in memory and is never written.
     */
    const KEEP = 3 * 310 * 1024;
    let server: CmpServer;
    let client: CmpTestClient;

    before(async () => {
      server = await startCmp(mode, {
        pluginYaml: pluginYaml('kept', 'generate:\n  command: [sh, -c, "echo {}"]'),
        socketName: 'kept.sock',
        env: { CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_SPOOL_KEEP_BYTES: String(KEEP), CMP_OFFLOAD_HTTP_ADDR: 'off' },
      });
      client = openCmpClient(server.socketPath);
    });
    after(async () => {
      client?.close();
      await server?.stop();
    });

    const blob = () => buildTgz([{ name: 'app', type: 'dir' }, { name: 'app/blob.bin', content: randomBytes(300 * 1024) }]);
    const generate = async (tgz: Buffer) => assert.deepEqual(await client.generate({ metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 1024) }), { value: { manifests: ['{}'], sourceType: '' } });
    /** The proxy's work root: the kept copies, once no request is in flight. */
    const kept = () => leftovers(server).filter(p => path.dirname(p) === server.workRoots[0]);

    // Standalone plugin commands run as the proxy's uid: a kept copy would be theirs to read.
    if (mode === 'standalone') test('standalone keeps no copy, whatever CMP_OFFLOAD_SPOOL_KEEP_BYTES says', async () => {
      const t = blob();
      await Promise.all([generate(t), generate(t)]);
      await generate(t);
      await eventually(() => leftovers(server).length === 0, 5_000, `no kept copy (left: ${leftovers(server).join(', ')})`);
    });

    // Defined in distributed mode only (npm test reports no skips): there no plugin runs in the proxy.
    if (mode === 'distributed') test('a copy outlives its request and is not written again for the next one; under a storm of 50 distinct tarballs the copies kept stay within the bound', async () => {
      const t = blob();
      await generate(t);
      await eventually(() => leftovers(server).length === 1, 5_000, `one kept copy (left: ${leftovers(server).join(', ')})`);
      const file = kept()[0]!;
      assert.ok(file.endsWith('.tgz'), `kept: ${kept().join(', ')}`);
      assert.deepEqual(fs.readFileSync(file), t);
      const { ino, mtimeMs } = fs.statSync(file);
      await new Promise(r => setTimeout(r, 20));
      await generate(t);
      await eventually(() => leftovers(server).length === 1, 5_000, 'only the kept copy');
      const again = fs.statSync(file);
      assert.deepEqual([again.ino, again.mtimeMs], [ino, mtimeMs], 'the kept copy was replaced or written again');
      // A storm of 48 distinct tarballs, 4 at a time (50 with the two below): what is kept never exceeds the bound.
      const storm = Array.from({ length: 48 }, blob);
      for (let i = 0; i < storm.length; i += 4) {
        await Promise.all(storm.slice(i, i + 4).map(generate));
        await eventually(() => leftovers(server).every(p => p.endsWith('.tgz')), 5_000, 'request dirs removed');
        const bytes = kept().reduce((sum, p) => sum + fs.statSync(p).size, 0);
        assert.ok(bytes <= KEEP && kept().length >= 2, `kept ${kept().length} copies, ${bytes} bytes (bound ${KEEP})`);
      }
      // The most recently used are the ones kept: two more, one after the other.
      const tail = [blob(), blob()];
      for (const t of tail) await generate(t);
      await eventually(() => leftovers(server).every(p => p.endsWith('.tgz')), 5_000, 'request dirs removed');
      const last = new Set(tail.map(t => t.toString('base64')));
      for (const p of kept().slice()) last.delete(fs.readFileSync(p).toString('base64'));
      assert.equal(last.size, 0, 'the last two tarballs are not kept');
    });
  });
}

describe('shared tarball copies and same-uid plugin commands (standalone)', () => {
  // Standalone keeps no copy once its last request is over, but requests for the same tarball in
  // flight at once share one in the work root. The plugin's command runs in <work root>/<run dir>/app
  // as the proxy's uid, so it can write to that copy: ROLE=plain appends to it, ROLE=stealthy writes
  // another valid tarball over its start and restores its mtime (same inode, size and mtime).
  // ROLE=hold keeps its request (and so the copy) in flight until the test creates $RELEASE.
  const SCRIPT = [
    'case "$ROLE" in',
    '  plain) for f in ../../*.tgz; do printf x >> "$f"; done ;;',
    '  stealthy) for f in ../../*.tgz; do touch -r "$f" ref && dd if="$EVIL" of="$f" conv=notrunc status=none && touch -r ref "$f"; done ;;',
    '  hold) i=0; while [ ! -e "$RELEASE" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done ;;',
    'esac',
    `exec ${LIST_TREE.map(a => `'${a}'`).join(' ')}`,
  ].join('\n');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-kept-evil-'));
  const evil = path.join(dir, 'evil.tgz');
  const release = path.join(dir, 'release');
  let server: CmpServer;
  let client: CmpTestClient;

  before(async () => {
    fs.writeFileSync(evil, buildTgz([{ name: 'app', type: 'dir' }, { name: 'app/a.yaml', content: 'evil: true\n' }]));
    server = await startCmp('standalone', {
      pluginYaml: pluginYaml('kept-evil', `generate:\n  command: [sh, -c, ${JSON.stringify(SCRIPT)}]`),
      socketName: 'kept-evil.sock',
      // One process: the requests share the store that holds the copy; room for the holder beside them.
      env: { CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_HTTP_ADDR: 'off', CMP_OFFLOAD_PROXY_PROCESSES: '1', CMP_OFFLOAD_CONCURRENCY: '4' },
    });
    client = openCmpClient(server.socketPath);
  });
  after(async () => {
    fs.writeFileSync(release, '');
    client?.close();
    await server?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const victim = () => buildTgz([{ name: 'app', type: 'dir' }, { name: 'app/a.yaml', content: `good: ${randomBytes(2048).toString('hex')}\n` }]);
  const generate = (tgz: Buffer, role: string) =>
    client.generate({
      metadata: repoMetadata(tgz, { appRelPath: 'app', env: [{ name: 'ROLE', value: role }, { name: 'EVIL', value: evil }, { name: 'RELEASE', value: release }] }),
      chunks: chunksOf(tgz, 1024),
    });
  /** The shared copies in the work root, with their bytes. */
  const shared = () =>
    leftovers(server)
      .filter(p => p.endsWith('.tgz'))
      .map(p => fs.readFileSync(p));
  const listing = (out: Awaited<ReturnType<typeof generate>>) => {
    assert.ok('value' in out, JSON.stringify(out));
    return JSON.parse(out.value.manifests[0]!).entries as Record<string, string>;
  };
  /** A request for `tgz` that holds its copy until released. */
  async function holding(tgz: Buffer) {
    fs.rmSync(release, { force: true });
    const held = generate(tgz, 'hold');
    await eventually(() => shared().length === 1, 10_000, 'the shared copy of the held request');
    return async () => {
      fs.writeFileSync(release, '');
      return listing(await held);
    };
  }

  test('a rewritten shared copy is not reused: the next request gets the tarball it sent', async () => {
    const tgz = victim();
    const want = listing(await generate(tgz, 'none'));
    assert.match(want['a.yaml']!, /^file 0644 good: /);
    const done = await holding(tgz);
    listing(await generate(tgz, 'plain'));
    assert.deepEqual(shared().map(b => b.length), [tgz.length + 1], 'the command did not rewrite the shared copy');
    assert.deepEqual(listing(await generate(tgz, 'none')), want);
    assert.deepEqual(await done(), want);
    await eventually(() => leftovers(server).length === 0, 5_000, `nothing kept (left: ${leftovers(server).join(', ')})`);
  });

  test('a shared copy changed behind its inode, size and mtime fails the extraction that finds it, and is received anew', async () => {
    const tgz = victim();
    const want = listing(await generate(tgz, 'none'));
    const done = await holding(tgz);
    listing(await generate(tgz, 'stealthy'));
    assert.ok(shared().some(b => b.length === tgz.length && b.subarray(0, 64).equals(fs.readFileSync(evil).subarray(0, 64))), 'the command did not change the shared copy');
    assertOurError('spoolChanged', await generate(tgz, 'none'), [repoMetadata(tgz).checksum], {
      prefix: 'generate manifest error receiving stream: error decompressing tgz file: ',
    });
    assert.deepEqual(listing(await generate(tgz, 'none')), want);
    // The holder extracted before the copy changed.
    assert.deepEqual(await done(), want);
    await eventually(() => leftovers(server).length === 0, 5_000, `nothing kept (left: ${leftovers(server).join(', ')})`);
  });
});
