import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appPathsRecord, fallbackReason, MemoryAppPaths, originOf, refreshAfter, unchanged, viewOf, type AppPathsRecord } from '../../../cmp/cache/app-paths.js';

const env = (sourcePath: string, app = 'guestbook') => [
  { name: 'ARGOCD_APP_NAME', value: app },
  { name: 'ARGOCD_APP_SOURCE_REPO_URL', value: 'https://git.example/repo.git' },
  { name: 'ARGOCD_APP_SOURCE_PATH', value: sourcePath },
];
const shape = { touched: ['guestbook/values.yaml'], listed: ['guestbook'], revision: false };

test('a record: the value moved to the repository root, or why there is none', () => {
  const o = originOf(env('apps/guestbook'), 'guestbook', 'helm');
  assert.equal(o.root, 'apps');
  const r = appPathsRecord(o, { shape }, 1000, 500)!;
  assert.deepEqual(r, { app: 'guestbook', plugin: 'helm', repoUrl: 'https://git.example/repo.git', sourcePath: 'apps/guestbook', value: '/"apps/guestbook;/apps/guestbook', at: 1000, until: 1500 });
  assert.match(appPathsRecord(originOf(env('other/guestbook'), 'apps/guestbook', 'helm'), { shape }, 0, 1)!.reason!, /ARGOCD_APP_SOURCE_PATH/);
  assert.match(appPathsRecord(o, { reason: fallbackReason({ complete: false, reason: 'too many paths' }) }, 0, 1)!.reason!, /too many paths/);
  assert.equal(appPathsRecord(originOf([], '.', 'helm'), { shape }, 0, 1), undefined);
});

test('the view: the newest record, and no value once a second source shows up', () => {
  const o = originOf(env('apps/guestbook'), 'apps/guestbook', 'helm');
  const older = appPathsRecord(o, { reason: 'first' }, 1000, 10_000)!;
  const newer = appPathsRecord(o, { shape: { ...shape, touched: ['apps/guestbook/a.yaml'], listed: [] } }, 2000, 10_000)!;
  assert.deepEqual(viewOf([older, newer]), {
    app: 'guestbook',
    derivedAt: new Date(2000).toISOString(),
    plugin: 'helm',
    repoUrl: 'https://git.example/repo.git',
    sourcePath: 'apps/guestbook',
    value: '/"apps/guestbook/a.yaml;/apps/guestbook/a.yaml',
  });
  const second = appPathsRecord(originOf(env('charts/guestbook'), 'charts/guestbook', 'helm'), { shape }, 1500, 10_000)!;
  const view = viewOf([newer, second])!;
  assert.equal(view.value, undefined);
  assert.match(view.reason!, /several sources/);
  assert.equal(viewOf([]), undefined);
  // The same source through an upgraded plugin (its name carries the version) is not a second source.
  const upgraded = appPathsRecord(originOf(env('apps/guestbook'), 'guestbook', 'helm-v2'), { shape }, 3000, 10_000)!;
  assert.equal(viewOf([newer, upgraded])!.value, '/"apps/guestbook;/apps/guestbook');
});

test('memory store: one record per source, replaced by the next, gone after the TTL', async () => {
  let now = 0;
  const store = new MemoryAppPaths(1000, () => now);
  const o = originOf(env('apps/guestbook'), 'apps/guestbook', 'helm');
  const rec = (at: number, reason: string): AppPathsRecord => appPathsRecord(o, { reason }, at, 1000)!;
  await store.put(rec(0, 'one'));
  now = 10;
  await store.put(rec(10, 'two'));
  assert.deepEqual((await store.get('guestbook')).map(r => r.reason), ['two']);
  await store.put(appPathsRecord(originOf(env('x', 'other'), 'x', 'helm'), { reason: 'x' }, 10, 1000)!);
  assert.deepEqual([...(await store.all()).keys()].sort(), ['guestbook', 'other']);
  now = 1011;
  assert.deepEqual(await store.get('guestbook'), []);
  assert.equal((await store.all()).size, 0);
});

test('note: the same outcome again is not rewritten while fresh; a change, or an old record, is', async () => {
  let now = 0;
  const store = new MemoryAppPaths(100_000, () => now);
  const o = originOf(env('apps/guestbook'), 'guestbook', 'helm');
  const refresh = refreshAfter(100_000);
  assert.equal(refresh, 50_000);
  assert.equal(refreshAfter(48 * 3600_000), 3600_000);
  const at = (t: number, outcome: { shape: typeof shape } | { reason: string } = { shape }) => appPathsRecord(o, outcome, t, 100_000)!;
  assert.equal(await store.note(at(0), refresh), true);
  now = 10;
  assert.equal(await store.note(at(10), refresh), false, 'a hit that derives the stored value writes nothing');
  assert.deepEqual((await store.get('guestbook')).map(r => r.at), [0]);
  assert.equal(await store.note(at(10, { reason: 'fallback' }), refresh), true, 'a changed outcome is written');
  assert.equal(await store.note(at(10), refresh), true);
  now = 10 + refresh;
  assert.equal(await store.note(at(now), refresh), true, 'an old record is confirmed anew');
  assert.deepEqual((await store.get('guestbook')).map(r => r.at), [now]);
  assert.equal(unchanged(at(0), at(1), refresh, 1), true);
  assert.equal(unchanged(at(0), { ...at(1), plugin: 'helm-v2' }, refresh, 1), false);
});

test('the derivation of a shape is remembered: the same shape and root give the same value without deriving again', () => {
  const o = originOf(env('apps/guestbook'), 'guestbook', 'helm');
  const first = appPathsRecord(o, { shape }, 0, 1)!;
  const again = appPathsRecord(o, { shape }, 0, 1)!;
  assert.equal(again.value, first.value);
  // A shape object seen once keeps its id: mutating it afterwards (never done outside this test) shows the memo is used.
  const s = { touched: ['guestbook/x.yaml'], listed: [], revision: false };
  assert.equal(appPathsRecord(o, { shape: s }, 0, 1)!.value, '/"apps/guestbook/x.yaml;/apps/guestbook/x.yaml');
  s.touched = ['guestbook/y.yaml'];
  assert.equal(appPathsRecord(o, { shape: s }, 0, 1)!.value, '/"apps/guestbook/x.yaml;/apps/guestbook/x.yaml');
  // Another root is another derivation.
  assert.equal(appPathsRecord(originOf(env('charts/guestbook'), 'guestbook', 'helm'), { shape: s }, 0, 1)!.value, '/"charts/guestbook/y.yaml;/charts/guestbook/y.yaml');
});
