import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmod, mkdir } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { goGlob } from '../../../cmp/go/filepath-glob.js';
import { compareGoStrings, realFs } from '../../../cmp/go/glob-fs.js';
import { zglob } from '../../../cmp/go/zglob.js';
import { makeTree, memoryFs } from './glob-tree.js';

const VIRTUAL = '/virtual/repo';

// Same pattern, same tree: once on disk, once in memory; results compared relative to the root.
const PATTERNS = [
  'app/*',
  'app/**/kustomization.yaml',
  'app/**/*/plugin.yaml',
  'app/sub/**',
  'app/{Chart,values}.yaml',
  'app/Chart.yam?',
  'app/[!c]onfig',
  'app/broken',
  'app/linkdir/*',
  'other/*',
  'app/nope/*',
  'app/does-not-exist',
  'app/Chart.yaml/x/*',
  'app/*[',
];

async function outcome(run: () => Promise<string[]>, root: string): Promise<string[] | string> {
  try {
    return (await run()).map(p => p.slice(root.length));
  } catch (err) {
    return `error: ${(err as Error).message.split(root).join('<root>')}`;
  }
}

describe('both engines against an in-memory GlobFs', () => {
  let root = '';
  let cleanup: () => Promise<void> = async () => {};
  before(async () => ({ root, cleanup } = await makeTree()));
  after(() => cleanup());
  const mem = memoryFs(VIRTUAL);

  for (const pattern of PATTERNS) {
    test(`filepath.Glob of ${pattern} gives the same answer in memory as on disk`, async () => {
      const disk = await outcome(() => goGlob(`${root}/${pattern}`), root);
      const virtual = await outcome(() => goGlob(`${VIRTUAL}/${pattern}`, mem), VIRTUAL);
      assert.deepEqual(virtual, disk);
    });
    test(`zglob of ${pattern} gives the same answer in memory as on disk`, async () => {
      const disk = await outcome(() => zglob(`${root}/${pattern}`), root);
      const virtual = await outcome(() => zglob(`${VIRTUAL}/${pattern}`, mem), VIRTUAL);
      assert.deepEqual(virtual, disk);
    });
  }

  test('the in-memory answers are not trivially empty', async () => {
    assert.deepEqual(await zglob(`${VIRTUAL}/app/**/kustomization.yaml`, mem), [
      `${VIRTUAL}/app/a/b/kustomization.yaml`,
      `${VIRTUAL}/app/a/kustomization.yaml`,
      `${VIRTUAL}/app/kustomization.yaml`,
    ]);
    assert.deepEqual(await goGlob(`${VIRTUAL}/app/linkdir/*`, mem), [`${VIRTUAL}/app/linkdir/one.yaml`]);
  });
});

describe('realFs', () => {
  let root = '';
  let cleanup: () => Promise<void> = async () => {};
  before(async () => ({ root, cleanup } = await makeTree()));
  after(async () => {
    await chmod(`${root}/locked`, 0o755).catch(() => {});
    await cleanup();
  });

  test('reports missing paths (ENOENT and ENOTDIR) as undefined', async () => {
    assert.equal(await realFs.stat(`${root}/nope`), undefined);
    assert.equal(await realFs.lstat(`${root}/app/Chart.yaml/x`), undefined);
    assert.equal(await realFs.readdir(`${root}/nope`), undefined);
    assert.equal(await realFs.stat(`${root}/app/broken`), undefined);
  });

  test('tells symlinks from what they point to', async () => {
    assert.deepEqual(await realFs.lstat(`${root}/app/linkdir`), { isDir: false, isSymlink: true });
    assert.deepEqual(await realFs.stat(`${root}/app/linkdir`), { isDir: true, isSymlink: false });
    assert.deepEqual(await realFs.readdir(`${root}/app/linkdir`), ['one.yaml']);
  });

  // Root ignores permissions: as root (CI) the calls run in a child that drops to nobody.
  test('throws other errors with Go PathError wording', async () => {
    await mkdir(`${root}/locked/inner`, { recursive: true });
    await chmod(`${root}/locked`, 0o000);
    const got = await asUnprivileged(root);
    assert.notEqual(got.uid, 0, 'the calls ran without root, to which permissions do not apply');
    const denied = (op: string, rel: string) => ({ error: `${op} ${root}/${rel}: permission denied` });
    assert.deepEqual(got.readdir, denied('open', 'locked'));
    assert.deepEqual(got.stat, denied('stat', 'locked/inner'));
    assert.deepEqual(got.zglob, denied('stat', 'locked/inner'));
    // filepath.Glob ignores I/O errors.
    assert.deepEqual(got.goGlob, { value: [] });
  });
});

type Settled = { value: unknown } | { error: string };

/**
 * realFs.readdir and .stat, zglob and goGlob on `root`'s locked dir, run in a child process: as
 * nobody (65534) when the tests run as root, else as the current user. The child imports the
 * compiled modules, so the build must be reachable by nobody (as .ci/run makes the checkout).
 */
async function asUnprivileged(root: string): Promise<{ uid: number } & Record<'readdir' | 'stat' | 'zglob' | 'goGlob', Settled>> {
  const uid = process.getuid?.() === 0 ? 65534 : undefined;
  // mkdtemp's 0700 would stop nobody at the root instead of at `locked`.
  await chmod(root, 0o755);
  const url = (rel: string) => new URL(rel, import.meta.url).href;
  const script = `
    const { realFs } = await import(${JSON.stringify(url('../../../cmp/go/glob-fs.js'))});
    const { zglob } = await import(${JSON.stringify(url('../../../cmp/go/zglob.js'))});
    const { goGlob } = await import(${JSON.stringify(url('../../../cmp/go/filepath-glob.js'))});
    const root = process.env.GLOB_ROOT;
    const settle = p => p.then(value => ({ value }), err => ({ error: err.message }));
    process.stdout.write(JSON.stringify({
      uid: process.getuid(),
      readdir: await settle(realFs.readdir(root + '/locked')),
      stat: await settle(realFs.stat(root + '/locked/inner')),
      zglob: await settle(zglob(root + '/locked/inner/*')),
      goGlob: await settle(goGlob(root + '/locked/*')),
    }));`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    cwd: '/',
    env: { PATH: process.env.PATH, GLOB_ROOT: root },
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(uid !== undefined ? { uid, gid: uid } : {}),
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  const [code] = (await once(child, 'close')) as [number | null];
  assert.equal(code, 0, `the unprivileged child failed (is the build reachable by uid ${uid ?? process.getuid?.()}?): ${err}`);
  return JSON.parse(out);
}

test('compareGoStrings orders by UTF-8 bytes, not UTF-16 code units', () => {
  const names = ['\u{1F600}', '\uFF21', 'b', 'B', 'é'];
  assert.deepEqual([...names].sort(compareGoStrings), ['B', 'b', 'é', '\uFF21', '\u{1F600}']);
  assert.notDeepEqual([...names].sort(), [...names].sort(compareGoStrings));
});
