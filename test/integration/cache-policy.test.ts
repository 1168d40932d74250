import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { MemoryAppPaths, originOf, WHOLE_TREE_REASON, type AppPathsStore } from '../../cmp/cache/app-paths.js';
import { MemoryResultCache } from '../../cmp/cache/memory-result-cache.js';
import type { ResultCache } from '../../cmp/cache/result-cache.js';
import type { TracedRequest } from '../../cmp/cache/traced-key.js';
import { compileOptions } from '../../cmp/config/options.js';
import { contextWithDeadline, type Ctx } from '../../cmp/context.js';
import { CANCELED_TEXT, type CmpError } from '../../cmp/errors.js';
import { metrics } from '../../cmp/observe/metrics.js';
import type { PluginResult } from '../../cmp/plugin/request.js';
import { RedisAppPaths } from '../../cmp/queue/app-paths-store.js';
import { KeySpace } from '../../cmp/queue/keys.js';
import { RedisResultCache } from '../../cmp/queue/redis-result-cache.js';
import { writeResult } from '../../cmp/queue/result-store.js';
import { writeReads } from '../../cmp/queue/traced-store.js';
import type { TreeEntry, TreeIndex } from '../../cmp/tar/tree-index.js';
import type { RecordedReads } from '../../cmp/trace/read-recorder.js';
import { answerWithCache, type CacheSite, type Ran, type Run } from '../../proxy/dispatch/cache-policy.js';
import { guard } from '../../proxy/dispatch/redis-step.js';
import { UNSTORED_TEXT } from '../../proxy/dispatch/run-watch.js';
import { startRedis, type RedisServer } from '../helpers/redis-server.js';

/**
 * The result-cache policy (proxy/dispatch/cache-policy.ts) over both stores: the same cases
 * against the memory store (standalone: this process stores the whole-tree entry) and the
 * Redis store on a real redis-server (distributed: a worker stores it and leaves its read
 * record beside it, as worker/processor.ts does).
 */

const TTL_MS = 60_000;
const SIGNING_KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const PLUGIN = 'policy-test';

let server: RedisServer;
let redis: Redis;
const keys = new KeySpace('{cmp-policy}');

before(async () => {
  server = await startRedis();
  redis = new Redis(server.url);
});

after(async () => {
  redis.disconnect();
  await server.stop();
});

interface Mode {
  name: string;
  /** A fresh store and paths store, for one app. */
  open(app: string, log?: pino.Logger): { store: ResultCache; paths: AppPathsStore };
  /** How a run of `key` ends in this mode, as the mode's dispatcher hands it to `keep`. */
  ran(store: ResultCache, app: string, key: string, result: PluginResult, reads: RecordedReads | undefined): Promise<Ran>;
}

const quiet = pino({ level: 'silent' });

const modes: Mode[] = [
  {
    name: 'memory',
    open: () => ({ store: new MemoryResultCache(64 * 1024 * 1024, TTL_MS), paths: new MemoryAppPaths(TTL_MS) }),
    ran: async (_store, _app, _key, result, reads) => ({ result, unstored: undefined, wholeTreeStored: false, reads: async () => reads }),
  },
  {
    name: 'redis',
    open: (app, log = quiet) => ({
      store: new RedisResultCache({ redis, signingKey: SIGNING_KEY, keys, plugin: PLUGIN, app, ttlMs: TTL_MS, log }),
      paths: new RedisAppPaths(redis, SIGNING_KEY, keys),
    }),
    ran: async (store, app, key, result, reads) => {
      // What the worker does after a run (worker/processor.ts): its read record, then the whole-tree entry.
      if (reads) await writeReads(redis, SIGNING_KEY, keys.tracedReads(PLUGIN, app, key), reads, TTL_MS);
      await writeResult(redis, SIGNING_KEY, keys.cacheEntry(PLUGIN, app, key), key, result, TTL_MS);
      return { result, unstored: undefined, wholeTreeStored: true, reads: () => (store as RedisResultCache).workerReads(key) };
    },
  },
];

let apps = 0;
/** A new app name per case: the Redis stores of one mode share a server. */
const newApp = () => `ns_app${++apps}`;

/** A simple tree: apps/web and files (at the root or in apps/web) whose contents `files` names. */
function treeOf(files: Record<string, string>): TreeIndex {
  const entries = new Map<string, TreeEntry>();
  const dir = (p: string) => entries.set(p, { path: p, type: 'dir', mode: 0o755, size: 0 });
  dir('apps');
  dir('apps/web');
  for (const [p, content] of Object.entries(files)) {
    entries.set(p, { path: p, type: 'file', mode: 0o644, size: content.length, sha256: content.padEnd(64, '0') });
  }
  return { entries, simple: true, traceable: true, contentDigest: () => '', globFs: () => { throw new Error('unused'); } };
}

/** A traced request of `app`, in the request family `family` (by default the app's own). */
function tracedOf(app: string, index: TreeIndex, family = app): TracedRequest {
  const env = [
    { name: 'ARGOCD_APP_NAME', value: app },
    { name: 'ARGOCD_APP_SOURCE_PATH', value: 'apps/web' },
  ];
  return { baseKey: `base-${family}`, revision: ['', '', ''], index, preserveFileMode: false, rule: 'auto', origin: originOf(env, 'apps/web', PLUGIN) };
}

const result = (text: string): PluginResult => ({ kind: 'generate', manifests: [text] });
const readsOf = (...touched: string[]): RecordedReads => ({ complete: true, touched, listed: [], moved: [], traversed: [] });

/** A run that must not happen. */
const noRun: Run = async () => {
  throw new Error('the cache should have answered');
};

/** A run answering `value`, recording what the policy asked of it. */
function runAnswering(mode: Mode, store: ResultCache, app: string, value: PluginResult, reads?: RecordedReads) {
  const calls: Array<{ cached: boolean }> = [];
  const run: Run = async cached => {
    calls.push({ cached: cached !== undefined });
    if (cached) await cached.keep(await mode.ran(store, app, cached.key, value, reads));
    return value;
  };
  return { run, calls };
}

function siteOf(store: ResultCache, paths: AppPathsStore, log?: pino.Logger): CacheSite {
  return { store, paths, ttlMs: TTL_MS, log, guard: step => step };
}

const ctx = (): Ctx => contextWithDeadline(undefined);

/** The app's noted record, once the background note has landed. */
async function notedFor(paths: AppPathsStore, app: string, until: (r: { value?: string; reason?: string }) => boolean) {
  for (let i = 0; i < 200; i++) {
    const r = (await paths.get(app))[0];
    if (r && until(r)) return r;
    await new Promise(res => setTimeout(res, 10));
  }
  assert.fail(`no matching manifest-generate-paths record for ${app}: ${JSON.stringify(await paths.get(app))}`);
}

async function counter(c: { get(): Promise<{ values: Array<{ value: number; labels: Record<string, unknown> }> }> }, label: Record<string, string>) {
  const v = (await c.get()).values.find(x => Object.entries(label).every(([k, want]) => x.labels[k] === want));
  return v?.value ?? 0;
}

for (const mode of modes) {
  describe(`cache policy over the ${mode.name} store`, () => {
    test('a bypassed request runs uncached and stores nothing', async () => {
      const app = newApp();
      const { store, paths } = mode.open(app);
      const { run, calls } = runAnswering(mode, store, app, result('bypassed'));
      assert.deepEqual(await answerWithCache(siteOf(store, paths), { kind: 'generate', key: undefined, traced: undefined, ctx: ctx() }, run), result('bypassed'));
      assert.deepEqual(calls, [{ cached: false }]);
    });

    test('a miss runs and stores the whole-tree entry; the same key is then answered without a run', async () => {
      const app = newApp();
      const { store, paths } = mode.open(app);
      const site = siteOf(store, paths);
      const req = { kind: 'generate' as const, key: 'k-whole', traced: undefined, ctx: ctx() };
      const { run, calls } = runAnswering(mode, store, app, result('one'));
      assert.deepEqual(await answerWithCache(site, req, run), result('one'));
      assert.deepEqual(calls, [{ cached: true }]);
      assert.deepEqual(await store.read('k-whole'), result('one'));
      assert.deepEqual(await answerWithCache(site, { ...req, ctx: ctx() }, noRun), result('one'));
    });

    test('a traced run stores a traced entry and a shape; a tree that differs only where it did not read is a traced hit', async () => {
      const app = newApp();
      const { store, paths } = mode.open(app);
      const site = siteOf(store, paths);
      const first = tracedOf(app, treeOf({ 'apps/web/values.yaml': 'a', 'README': 'r1' }));
      const { run } = runAnswering(mode, store, app, result('traced'), readsOf('apps/web/values.yaml'));
      await answerWithCache(site, { kind: 'generate', key: 'k-tree1', traced: first, ctx: ctx() }, run);
      assert.equal((await store.shapes(first.baseKey)).length, 1);
      const noted = await notedFor(paths, app, r => r.value !== undefined);
      assert.match(noted.value!, /apps\/web/);

      const hitsBefore = await counter(metrics.tracedCache, { result: 'hit' });
      // Another tree (another whole-tree key): only the README, which the run did not read, changed.
      const second = tracedOf(app, treeOf({ 'apps/web/values.yaml': 'a', 'README': 'r2' }));
      assert.deepEqual(await answerWithCache(site, { kind: 'generate', key: 'k-tree2', traced: second, ctx: ctx() }, noRun), result('traced'));
      assert.equal(await counter(metrics.tracedCache, { result: 'hit' }), hitsBefore + 1);

      // What it read changed: a miss.
      const third = tracedOf(app, treeOf({ 'apps/web/values.yaml': 'b', 'README': 'r2' }));
      const { run: run3, calls } = runAnswering(mode, store, app, result('changed'), readsOf('apps/web/values.yaml'));
      assert.deepEqual(await answerWithCache(site, { kind: 'generate', key: 'k-tree3', traced: third, ctx: ctx() }, run3), result('changed'));
      assert.deepEqual(calls, [{ cached: true }]);
    });

    test("a whole-tree hit notes the app's current shape, or why there is none", async () => {
      const app = newApp();
      const { store, paths } = mode.open(app);
      const site = siteOf(store, paths);
      const t = tracedOf(app, treeOf({ 'apps/web/values.yaml': 'a' }));
      await answerWithCache(site, { kind: 'generate', key: 'k-plain', traced: undefined, ctx: ctx() }, runAnswering(mode, store, app, result('plain')).run);
      // The whole-tree entry is there, no shape is recorded for the family: the reason says so.
      assert.deepEqual(await answerWithCache(site, { kind: 'generate', key: 'k-plain', traced: t, ctx: ctx() }, noRun), result('plain'));
      assert.equal((await notedFor(paths, app, r => r.reason !== undefined)).reason, WHOLE_TREE_REASON);
      // A traced run of another tree records a shape whose entry this tree also has (same apps/web).
      // It is another app's, of the same family: this app's record can only come from the hit.
      const other = tracedOf(newApp(), treeOf({ 'apps/web/values.yaml': 'a', 'other.txt': 'x' }), app);
      await answerWithCache(site, { kind: 'generate', key: 'k-other', traced: other, ctx: ctx() }, runAnswering(mode, store, app, result('plain'), readsOf('apps/web/values.yaml')).run);
      assert.deepEqual(await answerWithCache(site, { kind: 'generate', key: 'k-plain', traced: t, ctx: ctx() }, noRun), result('plain'));
      assert.match((await notedFor(paths, app, r => r.value !== undefined)).value!, /apps\/web/);
    });

    test('an incomplete read record stores only the whole-tree entry, and the app learns why', async () => {
      const app = newApp();
      const { store, paths } = mode.open(app);
      const t = tracedOf(app, treeOf({ 'apps/web/values.yaml': 'a' }));
      const { run } = runAnswering(mode, store, app, result('partial'), { complete: false, reason: 'the tracer gave up' });
      await answerWithCache(siteOf(store, paths), { kind: 'generate', key: 'k-partial', traced: t, ctx: ctx() }, run);
      assert.deepEqual(await store.read('k-partial'), result('partial'));
      assert.deepEqual(await store.shapes(t.baseKey), []);
      assert.match((await notedFor(paths, app, r => r.reason !== undefined)).reason!, /incomplete: the tracer gave up/);
    });

    test('an answer flagged unstored is returned, not stored, and notes no manifest-generate-paths', async () => {
      const app = newApp();
      const { store, paths } = mode.open(app);
      const t = tracedOf(app, treeOf({ 'apps/web/values.yaml': 'a' }));
      const before = await counter(metrics.cacheUnstored, { reason: 'overlap' });
      const run: Run = async cached => {
        await cached!.keep({ result: result('tampered?'), unstored: 'overlap', wholeTreeStored: false, reads: async () => readsOf('apps/web/values.yaml') });
        return result('tampered?');
      };
      assert.deepEqual(await answerWithCache(siteOf(store, paths), { kind: 'generate', key: 'k-unstored', traced: t, ctx: ctx() }, run), result('tampered?'));
      assert.equal(await store.read('k-unstored'), undefined);
      assert.deepEqual(await store.shapes(t.baseKey), []);
      assert.equal(await counter(metrics.cacheUnstored, { reason: 'overlap' }), before + 1);
      const noted = (await paths.get(app))[0];
      assert.equal(noted?.reason, UNSTORED_TEXT.overlap);
      assert.equal(noted?.value, undefined);
    });
  });
}

describe('cache policy: what only the Redis store has', () => {
  test('a mis-signed entry is a miss, and logged', async () => {
    const app = newApp();
    const lines: string[] = [];
    const log = pino({ level: 'warn' }, { write: (s: string) => lines.push(s) });
    const { store, paths } = modes[1]!.open(app, log);
    await writeResult(redis, Buffer.from('another key, another key, 012345'), keys.cacheEntry(PLUGIN, app, 'k-forged'), 'k-forged', result('forged'), TTL_MS);
    const { run, calls } = runAnswering(modes[1]!, store, app, result('fresh'));
    assert.deepEqual(await answerWithCache(siteOf(store, paths, log), { kind: 'generate', key: 'k-forged', traced: undefined, ctx: ctx() }, run), result('fresh'));
    assert.deepEqual(calls, [{ cached: true }]);
    assert.ok(lines.some(l => l.includes('signature does not verify')), lines.join(''));
  });

  test("a lookup for a caller that gives up ends with Go's text; Redis away is UNAVAILABLE naming Redis", async () => {
    const away = await startRedis();
    const ro = compileOptions({ CMP_OFFLOAD_REDIS_URL: away.url, CMP_OFFLOAD_SIGNING_KEY: SIGNING_KEY.toString(), CMP_OFFLOAD_REDIS_TIMEOUT: '500ms' }).redis!;
    const client = new Redis(away.url, { maxRetriesPerRequest: 0, commandTimeout: 500, enableOfflineQueue: false });
    try {
      const app = newApp();
      const store = new RedisResultCache({ redis: client, signingKey: SIGNING_KEY, keys, plugin: PLUGIN, app, ttlMs: TTL_MS, log: quiet });
      const paths = new MemoryAppPaths(TTL_MS);
      const c = contextWithDeadline(undefined);
      const site: CacheSite = { store, paths, ttlMs: TTL_MS, log: quiet, guard: step => guard(ro, 'generate', c, step) };
      away.signal('SIGSTOP');
      const pending = answerWithCache(site, { kind: 'generate', key: 'k-abort', traced: undefined, ctx: c }, noRun);
      c.cancel();
      await assert.rejects(pending, (err: CmpError) => err.message.endsWith(CANCELED_TEXT));
      away.signal('SIGCONT');
      await away.stop();
      const c2 = contextWithDeadline(undefined);
      const down: CacheSite = { ...site, guard: step => guard(ro, 'generate', c2, step) };
      await assert.rejects(answerWithCache(down, { kind: 'generate', key: 'k-down', traced: undefined, ctx: c2 }, noRun), (err: CmpError) => {
        assert.equal(err.code, 14, err.message);
        assert.match(err.message, /redis/i);
        return true;
      });
    } finally {
      client.disconnect();
      await away.stop().catch(() => {});
    }
  });
});
