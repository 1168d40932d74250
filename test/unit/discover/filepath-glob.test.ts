import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { goGlob, goMatch } from '../../../cmp/go/filepath-glob.js';
import { makeTree } from './glob-tree.js';

const BAD = { message: 'syntax error in pattern' };

describe('goMatch', () => {
  // Go's own path/filepath matchTests table.
  const table: Array<[string, string, boolean | 'bad']> = [
    ['abc', 'abc', true],
    ['*', 'abc', true],
    ['*c', 'abc', true],
    ['a*', 'a', true],
    ['a*', 'abc', true],
    ['a*', 'ab/c', false],
    ['a*/b', 'abc/b', true],
    ['a*/b', 'a/c/b', false],
    ['a*b*c*d*e*/f', 'axbxcxdxe/f', true],
    ['a*b*c*d*e*/f', 'axbxcxdxexxx/f', true],
    ['a*b*c*d*e*/f', 'axbxcxdxe/xxx/f', false],
    ['a*b*c*d*e*/f', 'axbxcxdxexxx/fff', false],
    ['a*b?c*x', 'abxbbxdbxebxczzx', true],
    ['a*b?c*x', 'abxbbxdbxebxczzy', false],
    ['ab[c]', 'abc', true],
    ['ab[b-d]', 'abc', true],
    ['ab[e-g]', 'abc', false],
    ['ab[^c]', 'abc', false],
    ['ab[^b-d]', 'abc', false],
    ['ab[^e-g]', 'abc', true],
    ['a\\*b', 'a*b', true],
    ['a\\*b', 'ab', false],
    ['a?b', 'a☺b', true],
    ['a[^a]b', 'a☺b', true],
    ['a???b', 'a☺b', false],
    ['a[^a][^a][^a]b', 'a☺b', false],
    ['[a-ζ]*', 'α', true],
    ['*[a-ζ]', 'A', false],
    ['a?b', 'a/b', false],
    ['a*b', 'a/b', false],
    ['[\\]a]', ']', true],
    ['[\\-]', '-', true],
    ['[x\\-]', 'x', true],
    ['[x\\-]', '-', true],
    ['[x\\-]', 'z', false],
    ['[\\-x]', 'x', true],
    ['[\\-x]', '-', true],
    ['[\\-x]', 'a', false],
    ['[]a]', ']', 'bad'],
    ['[-]', '-', 'bad'],
    ['[x-]', 'x', 'bad'],
    ['[x-]', '-', 'bad'],
    ['[x-]', 'z', 'bad'],
    ['[-x]', 'x', 'bad'],
    ['[-x]', '-', 'bad'],
    ['[-x]', 'a', 'bad'],
    ['\\', 'a', 'bad'],
    ['[a-b-c]', 'a', 'bad'],
    ['[', 'a', 'bad'],
    ['[^', 'a', 'bad'],
    ['[^bc', 'a', 'bad'],
    ['a[', 'a', 'bad'],
    ['a[', 'ab', 'bad'],
    ['a[', 'x', 'bad'],
    ['a/b[', 'x', 'bad'],
    ['*x', 'xxx', true],
  ];
  for (const [pattern, name, want] of table) {
    test(`Match(${JSON.stringify(pattern)}, ${JSON.stringify(name)}) is ${want}`, () => {
      if (want === 'bad') assert.throws(() => goMatch(pattern, name), BAD);
      else assert.equal(goMatch(pattern, name), want);
    });
  }

  test('a ! inside a class is a literal, not a negation', () => {
    assert.equal(goMatch('[!c]onfig', 'config'), true);
    assert.equal(goMatch('[!c]onfig', 'xonfig'), false);
    assert.equal(goMatch('[!]x', '!x'), true);
  });

  test('a star skips single bytes, so a class can match inside a multi-byte rune as Go does', () => {
    // The second byte of "é" decodes to U+FFFD, which [^é] accepts.
    assert.equal(goMatch('*[^é]', 'é'), true);
    assert.equal(goMatch('[^é]', 'é'), false);
  });

  test('a malformed tail is reported even after the name already failed to match', () => {
    assert.throws(() => goMatch('x*[', 'abc'), BAD);
    assert.throws(() => goMatch('a*b[', ''), BAD);
  });

  test('star does not cross a slash and matches a leading dot', () => {
    assert.equal(goMatch('*.md', 'docs/a.md'), false);
    assert.equal(goMatch('*.yaml', '.hidden.yaml'), true);
  });
});

describe('goGlob on a real directory', () => {
  let root = '';
  let cleanup: () => Promise<void> = async () => {};
  before(async () => ({ root, cleanup } = await makeTree()));
  after(() => cleanup());
  const glob = (rel: string) => goGlob(`${root}/${rel}`);
  const abs = (...rels: string[]) => rels.map(r => `${root}/${r}`);

  test('a literal file name matches when the file exists and not otherwise', async () => {
    assert.deepEqual(await glob('app/Chart.yaml'), abs('app/Chart.yaml'));
    assert.deepEqual(await glob('app/missing.yaml'), []);
  });

  test('a literal name matches directories and broken symlinks (Lstat)', async () => {
    assert.deepEqual(await glob('app/empty'), abs('app/empty'));
    assert.deepEqual(await glob('app/broken'), abs('app/broken'));
  });

  test('star matches files, directories and symlinks, including dot files, sorted by name', async () => {
    assert.deepEqual(
      await glob('app/*'),
      abs(
        'app/!x',
        'app/.hidden.yaml',
        'app/Chart.yam?',
        'app/Chart.yaml',
        'app/a',
        'app/a*b',
        'app/broken',
        'app/config',
        'app/empty',
        'app/kustomization.yaml',
        'app/linkdir',
        'app/sub',
        'app/values.yaml',
      ),
    );
    assert.deepEqual(
      await glob('app/*.yaml'),
      abs('app/.hidden.yaml', 'app/Chart.yaml', 'app/kustomization.yaml', 'app/values.yaml'),
    );
  });

  test('double star is a single star: one level only', async () => {
    assert.deepEqual(await glob('app/**/kustomization.yaml'), abs('app/a/kustomization.yaml'));
    assert.deepEqual(await glob('app/**'), await glob('app/*'));
  });

  test('question mark and classes work, with ^ negating and ! literal', async () => {
    assert.deepEqual(await glob('app/Chart.yam?'), abs('app/Chart.yam?', 'app/Chart.yaml'));
    assert.deepEqual(await glob('app/[cC]hart.yaml'), abs('app/Chart.yaml'));
    assert.deepEqual(await glob('app/[^C]hart.yaml'), []);
    assert.deepEqual(await glob('app/[!c]onfig'), abs('app/config'));
    assert.deepEqual(await glob('app/[!]x'), abs('app/!x'));
  });

  test('a backslash escapes a meta character', async () => {
    assert.deepEqual(await glob('app/a\\*b'), abs('app/a*b'));
  });

  test('there is no brace expansion', async () => {
    assert.deepEqual(await glob('app/{Chart,values}.yaml'), []);
  });

  test('meta characters in directory segments are expanded level by level', async () => {
    assert.deepEqual(await glob('app/*/kustomization.yaml'), abs('app/a/kustomization.yaml'));
    assert.deepEqual(await glob('app/?/?/kustomization.yaml'), abs('app/a/b/kustomization.yaml'));
  });

  test('a cleaned pattern with .. can leave the app directory', async () => {
    // The caller cleans join(appPath, "../other/*") into this.
    assert.deepEqual(await glob('other/*'), abs('other/one.yaml'));
  });

  test('symlinked directories are followed', async () => {
    assert.deepEqual(await glob('app/linkdir/*.yaml'), abs('app/linkdir/one.yaml'));
    assert.deepEqual(await glob('app/*/one.yaml'), abs('app/linkdir/one.yaml'));
  });

  test('a missing directory gives no match and no error', async () => {
    assert.deepEqual(await glob('app/nope/*.yaml'), []);
    assert.deepEqual(await glob('app/Chart.yaml/*'), []);
  });

  test('a malformed pattern is an error even when nothing exists', async () => {
    await assert.rejects(glob('does/not/exist/['), BAD);
    await assert.rejects(glob('nope/[z-'), BAD);
    await assert.rejects(glob('app/*\\'), BAD);
  });
});
