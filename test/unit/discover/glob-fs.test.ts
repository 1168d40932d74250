import assert from 'node:assert/strict';
import { chmod, mkdir } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { goGlob } from '../../../cmp/discover/filepath-glob.js';
import { compareGoStrings, realFs } from '../../../cmp/discover/glob-fs.js';
import { zglob } from '../../../cmp/discover/zglob.js';
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

  const asRoot = process.getuid?.() === 0 && 'root ignores permissions';
  test('throws other errors with Go PathError wording', { skip: asRoot }, async () => {
    await mkdir(`${root}/locked/inner`, { recursive: true });
    await chmod(`${root}/locked`, 0o000);
    const denied = (op: string, rel: string) => ({ message: `${op} ${root}/${rel}: permission denied` });
    await assert.rejects(realFs.readdir(`${root}/locked`), denied('open', 'locked'));
    await assert.rejects(realFs.stat(`${root}/locked/inner`), denied('stat', 'locked/inner'));
    await assert.rejects(zglob(`${root}/locked/inner/*`), denied('stat', 'locked/inner'));
    // filepath.Glob ignores I/O errors.
    assert.deepEqual(await goGlob(`${root}/locked/*`), []);
  });
});

test('compareGoStrings orders by UTF-8 bytes, not UTF-16 code units', () => {
  const names = ['\u{1F600}', '\uFF21', 'b', 'B', 'é'];
  assert.deepEqual([...names].sort(compareGoStrings), ['B', 'b', 'é', '\uFF21', '\u{1F600}']);
  assert.notDeepEqual([...names].sort(), [...names].sort(compareGoStrings));
});
