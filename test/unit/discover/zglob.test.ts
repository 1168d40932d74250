import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { compileGoRegexp, zglob, zglobRegexp } from '../../../cmp/go/zglob.js';
import { makeTree } from './glob-tree.js';

describe('zglob on a real directory', () => {
  let root = '';
  let cleanup: () => Promise<void> = async () => {};
  before(async () => ({ root, cleanup } = await makeTree()));
  after(() => cleanup());
  const sut = (rel: string) => zglob(`${root}/${rel}`);
  const abs = (...rels: string[]) => rels.map(r => `${root}/${r}`);

  test('**/ matches zero or more directories', async () => {
    assert.deepEqual(
      await sut('app/**/kustomization.yaml'),
      abs('app/a/b/kustomization.yaml', 'app/a/kustomization.yaml', 'app/kustomization.yaml'),
    );
  });

  test('**/*/plugin.yaml matches a file one directory down', async () => {
    assert.deepEqual(await sut('app/**/*/plugin.yaml'), abs('app/config/plugin.yaml'));
  });

  test('a trailing ** matches only the direct children, directories included', async () => {
    assert.deepEqual(await sut('app/sub/**'), abs('app/sub/deep', 'app/sub/x.yaml'));
  });

  test('braces are alternation', async () => {
    assert.deepEqual(await sut('app/{Chart,values}.yaml'), abs('app/Chart.yaml', 'app/values.yaml'));
    assert.deepEqual(await sut('app/{config,sub}/*.yaml'), abs('app/config/plugin.yaml', 'app/sub/x.yaml'));
  });

  test('star matches dot files, directories and symlinks as themselves', async () => {
    assert.deepEqual(
      await sut('app/*.yaml'),
      abs('app/.hidden.yaml', 'app/Chart.yaml', 'app/kustomization.yaml', 'app/values.yaml'),
    );
    assert.deepEqual(
      await sut('app/*n*'),
      abs('app/.hidden.yaml', 'app/broken', 'app/config', 'app/kustomization.yaml', 'app/linkdir'),
    );
  });

  test('a pattern without * or { is literal: it matches only an existing path', async () => {
    assert.deepEqual(await sut('app/Chart.yaml'), abs('app/Chart.yaml'));
    assert.deepEqual(await sut('app/empty'), abs('app/empty'));
    // ? is not a wildcard: this names the file literally called "Chart.yam?".
    assert.deepEqual(await sut('app/Chart.yam?'), abs('app/Chart.yam?'));
  });

  test('a literal pattern that does not exist is an error', async () => {
    const notExist = { message: 'file does not exist' };
    await assert.rejects(sut('app/does-not-exist'), notExist);
    await assert.rejects(sut('app/Chart.yam'), notExist);
    await assert.rejects(sut('app/[cC]hart.yaml'), notExist);
    await assert.rejects(sut('app/values.yam?'), notExist);
    // Literal mode stats through symlinks, so a broken one does not exist.
    await assert.rejects(sut('app/broken'), notExist);
  });

  test('? in a wildcard pattern is a literal question mark', async () => {
    assert.deepEqual(await sut('app/*.yam?'), abs('app/Chart.yam?'));
  });

  test('classes are regexp classes: ^ negates and ! is a member', async () => {
    assert.deepEqual(await sut('app/[!v]*.yaml'), abs('app/values.yaml'));
    assert.deepEqual(await sut('app/[^v.]*.yaml'), abs('app/Chart.yaml', 'app/kustomization.yaml'));
  });

  test('an invalid class range is a regexp compile error', async () => {
    await assert.rejects(sut('app/*[z-a].yaml'), {
      message: 'error parsing regexp: invalid character class range: `z-a`',
    });
  });

  test('a missing walk root is a stat error naming the root', async () => {
    await assert.rejects(sut('app/nope/*.yaml'), {
      message: `stat ${root}/app/nope: no such file or directory`,
    });
    await assert.rejects(sut('app/Chart.yaml/x/*'), {
      message: `stat ${root}/app/Chart.yaml/x: not a directory`,
    });
  });

  test('a cleaned pattern with .. can leave the app directory', async () => {
    assert.deepEqual(await sut('other/*'), abs('other/one.yaml'));
  });

  test('symlinks below the root are not followed, a symlinked root is', async () => {
    assert.deepEqual(await sut('app/**/one.yaml'), []);
    assert.deepEqual(await sut('app/linkdir/*.yaml'), abs('app/linkdir/one.yaml'));
  });

  test('matching is case-sensitive', async () => {
    assert.deepEqual(await sut('app/chart.*'), []);
  });

  test('no match is an empty result, not an error', async () => {
    assert.deepEqual(await sut('app/**/*.json'), []);
  });
});

describe('the regexp zglob builds', () => {
  test('escapes punctuation as one-rune classes and keeps alphanumerics', () => {
    assert.equal(zglobRegexp('/a-b/**/c.d/*'), '/a[\\x2D]b/(.*/)?c[\\x2E]d/[^/]*');
    assert.equal(zglobRegexp('/x/{a.b,c}'), '/x/(a[\\x2E]b|c)');
    assert.equal(zglobRegexp('/x/*[^a-c]'), '/x/[^/]*[^a-c]');
  });

  test('compiles to a JS RegExp with Go semantics for dot and POSIX classes', () => {
    const dot = compileGoRegexp('^(.*/)?x$');
    assert.equal(dot.test('a\r/x'), true); // Go's . matches \r, unlike JS's
    assert.equal(dot.test('a\n/x'), false);
    const posix = compileGoRegexp('^[[:digit:]x]$');
    assert.equal(posix.test('7'), true);
    assert.equal(posix.test(':'), false);
  });

  test('reports Go regexp syntax errors with their texts', () => {
    assert.throws(() => compileGoRegexp('^[a\\]b$'), {
      message: 'error parsing regexp: missing closing ]: `[a\\]b$`',
    });
    assert.throws(() => compileGoRegexp('^[\\q]$'), {
      message: 'error parsing regexp: invalid escape sequence: `\\q`',
    });
    assert.throws(() => compileGoRegexp('^[[:foo:]]$'), {
      message: 'error parsing regexp: invalid character class range: `[:foo:]`',
    });
    assert.throws(() => compileGoRegexp('^[\\p{Nope}]$'), {
      message: 'error parsing regexp: invalid character class range: `\\p{Nope}`',
    });
  });

  test('repeated ** stays fast on long names that do not match', () => {
    const re = compileGoRegexp('^' + zglobRegexp('/a/**/**/**/**/**/**/**/**/x/********') + '$');
    const started = Date.now();
    // Without the collapse JS backtracking takes seconds on this 30-level name.
    assert.equal(re.test('/a/' + 'b/'.repeat(30) + 'y'.repeat(20) + '/'), false);
    assert.ok(Date.now() - started < 500);
    assert.equal(re.test('/a/x/q'), true);
    assert.equal(re.test('/a/b/c/x/q'), true);
    assert.equal(re.test('/a/x/q/r'), false);
  });

  test('supports Unicode classes and Perl escapes inside classes', () => {
    assert.equal(compileGoRegexp('^[\\p{Greek}]$').test('λ'), true);
    assert.equal(compileGoRegexp('^[\\PL]$').test('λ'), false);
    assert.equal(compileGoRegexp('^[\\d]$').test('٣'), false); // \d is ASCII-only in Go
    assert.equal(compileGoRegexp('^[\\W]$').test('-'), true);
  });
});
