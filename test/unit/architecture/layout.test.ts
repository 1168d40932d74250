import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { REPO_ROOT, SOURCE_ROOTS, importSpecifiers, tsFilesUnder } from '../../helpers/paths.js';

/**
 * The tree shows the roles: proxy/, worker/, runner/, keeper/ and cli/ at the top, cmp/ the
 * libraries they share (importing none of them), and cmp/go/ the code that mirrors Go byte for
 * byte, which depends on nothing of ours.
 */

const ROLES = ['proxy', 'worker', 'runner', 'keeper', 'cli'];

/** The top-level folder a relative import of `file` lands in (undefined for a package). */
function folderOf(file: string, spec: string): string | undefined {
  if (!spec.startsWith('.')) return undefined;
  return path.relative(REPO_ROOT, path.resolve(path.dirname(file), spec)).split(path.sep)[0];
}

test('cmp/go/ imports only itself, Node and its parsers (js-yaml, pako)', () => {
  const files = tsFilesUnder(REPO_ROOT, ['cmp/go']);
  assert.ok(files.length >= 20, `only ${files.length} files in cmp/go`);
  const outside = files.flatMap(f =>
    importSpecifiers(f)
      .filter(s => !(/^\.\/[^/]+$/.test(s) || s.startsWith('node:') || s === 'js-yaml' || s === 'pako'))
      .map(s => `${path.relative(REPO_ROOT, f)} → ${s}`),
  );
  assert.deepEqual(outside, []);
  assert.ok(fs.existsSync(path.join(REPO_ROOT, 'cmp/go/README.md')), 'cmp/go/README.md says what the folder mirrors');
});

test('no Go-fidelity module lives outside cmp/go/', () => {
  const stray = tsFilesUnder(REPO_ROOT, SOURCE_ROOTS).filter(f => /\/go-[^/]+\.ts$/.test(f) && !f.includes('/cmp/go/'));
  assert.deepEqual(stray.map(f => path.relative(REPO_ROOT, f)), []);
});

test('cmp/ imports no role; roles import no other role, except the worker speaking the runner protocol', () => {
  const wrong: string[] = [];
  for (const f of tsFilesUnder(REPO_ROOT, SOURCE_ROOTS)) {
    const from = path.relative(REPO_ROOT, f).split(path.sep)[0]!;
    for (const s of importSpecifiers(f)) {
      const to = folderOf(f, s);
      if (!to || to === from || !ROLES.includes(to)) continue;
      const target = path.relative(REPO_ROOT, path.resolve(path.dirname(f), s));
      const allowed = (from === 'worker' && /^runner\/(protocol|answer)\.js$/.test(target)) || (from === 'bin' && /^[a-z]+\/main\.js$|^cli\//.test(target));
      if (!allowed) wrong.push(`${path.relative(REPO_ROOT, f)} → ${target}`);
    }
  }
  assert.deepEqual(wrong, []);
});

test('every role is a folder at the top of the tree with its own main or entry', () => {
  for (const role of ROLES) assert.ok(fs.statSync(path.join(REPO_ROOT, role)).isDirectory(), role);
});

test("the README's folder table names every source folder, and every folder it names exists", () => {
  const readme = fs.readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');
  const table = readme.split('\n').filter(l => l.startsWith('| `'));
  const named = table.flatMap(l => [...l.split('|')[1]!.matchAll(/`([a-z0-9/]+)\/`/g)].map(m => m[1]!));
  for (const root of SOURCE_ROOTS) assert.ok(named.includes(root), `README.md's folder table lacks ${root}/`);
  for (const dir of named) assert.ok(fs.statSync(path.join(REPO_ROOT, dir)).isDirectory(), `README.md names ${dir}/, which does not exist`);
});
