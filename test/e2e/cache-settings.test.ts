import fs from 'node:fs';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startDistributed } from '../helpers/distributed.js';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { countRuns } from '../helpers/monorepo.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { tarballOf } from '../helpers/repo.js';
import { unrelatedChange } from '../helpers/unrelated-change.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { MODES, oneRunAtATime, startCmp, type CmpServer, type Mode } from './harness.js';

/**
 * The cache settings of docs/configuration.md, set through the env of real
 * processes: CMP_OFFLOAD_CACHE_TTL, CMP_OFFLOAD_CACHE_SALT, CMP_OFFLOAD_CACHE_MAX_BYTES and
 * CMP_OFFLOAD_TRACE_MAX_BYTES. Runs are counted by the plugin itself (a line per run in a
 * counter file outside the tree), so a hit is "no new line" and a rerun is "one more line".
 */
const work = pluginWritableTempDir('cmp-cache-settings-');
after(() => fs.rmSync(work, { recursive: true, force: true }));

let serial = 0;
const counterFile = () => path.join(work, `counter-${++serial}`);

/**
 * Appends TAG to COUNTER on every run and answers one JSON manifest naming TAG, padded with
 * PAD `x`s (so that a test controls the size of the answer), and quoting f.txt.
 */
const PADDED = (name: string) =>
  pluginYaml(name, `generate:
  command: [sh, -c]
  args:
    - |
      echo "$TAG" >> "$COUNTER"
      pad=$(head -c "\${PAD:-0}" /dev/zero | tr '\\0' x)
      printf '{"tag":"%s","pad":"%s","f":"%s"}\\n' "$TAG" "$pad" "$(cat f.txt)"`);

/** Ask for TAG's manifest; fails unless the answer is that manifest. */
async function ask(client: CmpTestClient, tgz: Buffer, counter: string, tag: string, pad = 0): Promise<void> {
  const out = await client.generate({
    metadata: repoMetadata(tgz, {
      env: [
        { name: 'COUNTER', value: counter },
        { name: 'TAG', value: tag },
        { name: 'PAD', value: String(pad) },
      ],
    }),
    chunks: chunksOf(tgz, 64 * 1024),
  });
  assert.ok('value' in out, `${tag}: ${JSON.stringify(out)}`);
  assert.equal(out.value.manifests.length, 1);
  assert.equal(JSON.parse(out.value.manifests[0]!).tag, tag);
}

/** How many times the plugin ran for `tag`. */
const runsOf = (counter: string, tag: string) => countRuns(counter).filter(l => l === tag).length;

const sleep = (ms: number) => new Promise(r => setTimeout(r, Math.max(0, ms)));

/** The cache entries (`<prefix>:out:…`) in a distributed server's Redis. */
async function cacheEntries(redisUrl: string): Promise<Array<{ key: string; pttl: number }>> {
  const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    const keys = (await redis.keys('*:out:*')).sort();
    return Promise.all(keys.map(async key => ({ key, pttl: await redis.pttl(key) })));
  } finally {
    redis.disconnect();
  }
}

async function withServer<T>(server: CmpServer, fn: (client: CmpTestClient) => Promise<T>): Promise<T> {
  const client = openCmpClient(server.socketPath);
  try {
    return await fn(client);
  } finally {
    client.close();
    await server.stop();
  }
}

for (const mode of MODES) {
  describe(`CMP_OFFLOAD_CACHE_TTL (${mode})`, () => {
    test('an entry is reused within the TTL and the plugin runs again once it has expired', async () => {
      // Time is the behaviour here, so the margins are wide: a hit needs the second request
      // to be answered within TTL of the first one's start, an expiry waits TTL + 1.5 s
      // after the first answer (the entry was stored before that answer). A warm-up request
      // (another key) first, so that a cold process does not eat into the TTL.
      const TTL_MS = 5000;
      // The content cache's entries (one per run; a traced run adds a second, see the traced tests).
      const server = await startCmp(mode, { pluginYaml: PADDED('ttl'), socketName: 'ttl.sock', env: { CMP_OFFLOAD_CACHE: 'on', CMP_OFFLOAD_CACHE_TTL: '5s' } });
      await withServer(server, async client => {
        const counter = counterFile();
        const tgz = await tarballOf({ 'f.txt': 'ttl' });
        await ask(client, tgz, counter, 'warm-up');
        const start = Date.now();
        await ask(client, tgz, counter, 'ttl');
        const stored = Date.now();
        assert.equal(runsOf(counter, 'ttl'), 1);
        if (mode === 'distributed') {
          // The shared cache holds it under a Redis TTL of CMP_OFFLOAD_CACHE_TTL (not the 24h default).
          const entries = await cacheEntries(server.redisUrl!);
          assert.equal(entries.length, 2, `the warm-up's entry and this one: ${JSON.stringify(entries)}`);
          for (const { pttl } of entries) assert.ok(pttl > 0 && pttl <= TTL_MS, `PTTL ${pttl} ms, expected within (0, ${TTL_MS}]`);
        }
        await ask(client, tgz, counter, 'ttl');
        const elapsed = Date.now() - start;
        assert.ok(elapsed < TTL_MS, `precondition: the second request was answered ${elapsed} ms after the first began (TTL ${TTL_MS} ms)`);
        assert.equal(runsOf(counter, 'ttl'), 1, 'within the TTL: a hit');
        await sleep(stored + TTL_MS + 1500 - Date.now());
        if (mode === 'distributed') assert.deepEqual(await cacheEntries(server.redisUrl!), [], 'Redis expired the entry');
        await ask(client, tgz, counter, 'ttl');
        assert.equal(runsOf(counter, 'ttl'), 2, 'after the TTL: the plugin runs again');
      });
    });
  });

  describe(`CMP_OFFLOAD_TRACE_MAX_BYTES (${mode})`, () => {
    /** Runs and traced-cache counters for a change no plugin reads (see unrelatedChange). */
    async function counts(env: Record<string, string>) {
      const { runs, miss, hit, fallback } = await unrelatedChange(mode, work, { env: { CMP_OFFLOAD_CACHE: 'traced', ...env } });
      return { runs, miss, hit, fallback };
    }

    test('the default limit records: a change to an unread file is a traced hit', async () => {
      assert.deepEqual(await counts({}), { runs: 1, miss: 1, hit: 1, fallback: 0 });
    });

    test('a tiny limit gives the record up: every run is a fallback and the unrelated change runs again', async () => {
      assert.deepEqual(await counts({ CMP_OFFLOAD_TRACE_MAX_BYTES: '16' }), { runs: 2, miss: 0, hit: 0, fallback: 2 });
    });
  });
}

describe('CMP_OFFLOAD_CACHE_MAX_BYTES (standalone in-memory cache)', () => {
  // Each small answer is one ~800-character manifest, counted by the cache as ~1.7 KB (two
  // bytes a character plus overheads): three fit under 6000, a fourth does not. The big
  // answer alone exceeds the cap.
  // The content cache's budget: one entry per answer (a traced run stores it under a second key too).
  // One run at a time: under load a run's last process can still be exiting when the next request
  // comes, and an answer of a run that overlapped another is not stored (it would look evicted).
  const CAP = { CMP_OFFLOAD_CACHE: 'on', CMP_OFFLOAD_CACHE_MAX_BYTES: '6000', ...oneRunAtATime('standalone') };
  const SMALL = 750;
  const BIG = 3500;
  const standalone: Mode = 'standalone';

  test('an answer bigger than the cap is not kept (it runs every time); a small one is', async () => {
    const server = await startCmp(standalone, { pluginYaml: PADDED('capped'), socketName: 'capped.sock', env: CAP });
    await withServer(server, async client => {
      const counter = counterFile();
      const tgz = await tarballOf({ 'f.txt': 'capped' });
      await ask(client, tgz, counter, 'big', BIG);
      await ask(client, tgz, counter, 'big', BIG);
      assert.equal(runsOf(counter, 'big'), 2, 'bigger than the cap: never kept');
      await ask(client, tgz, counter, 'small', SMALL);
      await ask(client, tgz, counter, 'small', SMALL);
      assert.equal(runsOf(counter, 'small'), 1, 'within the cap: kept');
    });
  });

  test('past the cap the least recently used entry is evicted; recently used ones stay', async () => {
    const server = await startCmp(standalone, { pluginYaml: PADDED('lru'), socketName: 'lru.sock', env: CAP });
    await withServer(server, async client => {
      const counter = counterFile();
      const tgz = await tarballOf({ 'f.txt': 'lru' });
      for (const tag of ['A', 'B', 'C']) await ask(client, tgz, counter, tag, SMALL);
      await ask(client, tgz, counter, 'A', SMALL); // a hit: A is now the most recently used
      assert.equal(runsOf(counter, 'A'), 1, 'three small answers fit');
      await ask(client, tgz, counter, 'D', SMALL); // the fourth: B, the least recently used, goes
      for (const tag of ['A', 'C', 'D']) await ask(client, tgz, counter, tag, SMALL);
      await ask(client, tgz, counter, 'B', SMALL);
      assert.deepEqual(
        Object.fromEntries(['A', 'B', 'C', 'D'].map(t => [t, runsOf(counter, t)])),
        { A: 1, B: 2, C: 1, D: 1 },
        'only B was evicted',
      );
    });
  });
});

describe('CMP_OFFLOAD_CACHE_SALT (distributed: proxies sharing one Redis)', { skip: !MODES.includes('distributed') && 'no distributed mode here' }, () => {
  // Standalone mode has no test here: its cache lives in the process, so a proxy restarted with
  // another salt misses whatever the salt, and two standalone proxies never share entries.
  test('proxies with the same salt share entries; a proxy with another salt runs the plugin again', async () => {
    const d = await startDistributed({
      pluginYaml: PADDED('salted'),
      socketName: 'salted.sock',
      workers: 1,
      // The content cache's entries (one per run), shared by salt.
      env: { CMP_OFFLOAD_CACHE: 'on', CMP_OFFLOAD_CACHE_SALT: 'image-1' },
    });
    const clients: CmpTestClient[] = [];
    try {
      const same = await d.addProxy({ CMP_OFFLOAD_CACHE_SALT: 'image-1' });
      const other = await d.addProxy({ CMP_OFFLOAD_CACHE_SALT: 'image-2' });
      const [first, second, third] = [d.proxy, same, other].map(p => {
        const c = openCmpClient(p.socketPath);
        clients.push(c);
        return c;
      });
      const counter = counterFile();
      const tgz = await tarballOf({ 'f.txt': 'salted' });
      await ask(first!, tgz, counter, 'app');
      await ask(second!, tgz, counter, 'app');
      assert.equal(runsOf(counter, 'app'), 1, 'same salt: the second proxy hits the first one\'s entry');
      await ask(third!, tgz, counter, 'app');
      assert.equal(runsOf(counter, 'app'), 2, 'another salt: a miss');
      await ask(third!, tgz, counter, 'app');
      await ask(first!, tgz, counter, 'app');
      assert.equal(runsOf(counter, 'app'), 2, 'each salt keeps its own entry');
      assert.equal((await cacheEntries(d.env.CMP_OFFLOAD_REDIS_URL!)).length, 2, 'two entries, one per salt');
    } finally {
      for (const c of clients) c.close();
      await d.stop();
    }
  });
});
