import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { REPO_ROOT, SOURCE_ROOTS, tsFilesUnder } from '../../helpers/paths.js';

/**
 * No silent catch in the product code: an error dropped on purpose says why (a comment on its
 * line or the line just above, or inside the catch block) or is logged. Caught here: a `.catch`
 * whose handler only returns a constant (`() => {}`, `() => undefined`, `() => 0`…), and a
 * `catch` block that holds no code or only a constant step (`return undefined;`, `continue;`,
 * `x = false;`).
 */

const ROOTS = SOURCE_ROOTS;
const CONSTANT = String.raw`(?:\{\s*\}|undefined|null|true|false|-?\d+|''|""|\[\])`;
const CATCH_ARROW = new RegExp(String.raw`\.catch\(\s*(?:\(\s*[\w$]*\s*\)|[\w$]+)\s*=>\s*${CONSTANT}\s*\)`);
const CATCH_BLOCK = /\bcatch\s*(?:\(\s*[\w$]*\s*\))?\s*\{/g;
const IGNORING_STEP = new RegExp(String.raw`^(?:return(?:\s+${CONSTANT})?|continue|break|[\w$.]+\s*=\s*${CONSTANT})\s*;?$`);
const COMMENT = /\/\/|\/\*/;
const LOG_CALL = /\b(?:log|logger)\??\.(?:trace|debug|info|warn|error|fatal)\(|\blogFailed\(/;

/** The text between the `{` at `open` and its matching `}` (braces in strings and comments are rare enough here to ignore). */
function blockBody(text: string, open: number): string {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === '{') depth++;
    else if (text[i] === '}' && --depth === 0) return text.slice(open + 1, i);
  }
  return text.slice(open + 1);
}

const lineOf = (text: string, index: number): number => text.slice(0, index).split('\n').length;
const withoutComments = (code: string): string => code.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '').trim();

/** `file:line: text` of every silent catch under the roots of `root`. */
export function silentCatches(root: string): string[] {
  const found: string[] = [];
  for (const file of tsFilesUnder(root, ROOTS)) {
    const text = fs.readFileSync(file, 'utf8');
    const lines = text.split('\n');
    const rel = path.relative(root, file);
    const explained = (line: number): boolean => COMMENT.test(lines[line - 1] ?? '') || COMMENT.test(lines[line - 2] ?? '');
    lines.forEach((l, i) => {
      if (CATCH_ARROW.test(l) && !explained(i + 1)) found.push(`${rel}:${i + 1}: ${l.trim()}`);
    });
    for (const m of text.matchAll(CATCH_BLOCK)) {
      const body = blockBody(text, m.index + m[0].length - 1);
      const code = withoutComments(body);
      if (code !== '' && !IGNORING_STEP.test(code)) continue;
      const line = lineOf(text, m.index);
      if (LOG_CALL.test(body) || COMMENT.test(body) || explained(line)) continue;
      found.push(`${rel}:${line}: ${lines[line - 1]!.trim()}`);
    }
  }
  return found;
}

test('every dropped error in cmp, proxy, worker and bin is logged or says why', () => {
  assert.ok(tsFilesUnder(REPO_ROOT, ROOTS).length > 150, 'too few source files read');
  assert.deepEqual(silentCatches(REPO_ROOT), []);
});

test('the silent-catch check can fail, and accepts a reason or a log call', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-silent-catch-'));
  try {
    fs.mkdirSync(path.join(root, 'cmp'), { recursive: true });
    fs.mkdirSync(path.join(root, 'test'), { recursive: true });
    const bad = [
      'await fs.rm(p).catch(() => {});',
      'const st = await fs.stat(p).catch(() => undefined);',
      'const n = await count().catch(_err => 0);',
      'try {',
      '  a();',
      '} catch {}',
      'try {',
      '  b();',
      '} catch (_) {',
      '  return undefined;',
      '}',
    ];
    const good = [
      'await fs.rm(p).catch(() => {}); // gone already: another path removed it',
      '// not there: nothing to compare',
      'const st = await fs.stat(p).catch(() => undefined);',
      'await close().catch(err => log.debug({ err }, "close failed"));',
      'try {',
      '  a();',
      '} catch {',
      '  // ESRCH: nothing left to signal',
      '}',
      'try {',
      '  b();',
      '} catch (err) {',
      '  log.warn({ err }, "b failed");',
      '}',
      'try {',
      '  c();',
      '} catch {',
      '  return fallback(name);',
      '}',
    ];
    fs.writeFileSync(path.join(root, 'cmp/bad.ts'), `${bad.join('\n')}\n`);
    fs.writeFileSync(path.join(root, 'cmp/good.ts'), `${good.join('\n')}\n`);
    fs.writeFileSync(path.join(root, 'test/skipped.ts'), 'p.catch(() => {});\n');
    assert.deepEqual(
      silentCatches(root).map(f => f.split(': ')[0]),
      ['cmp/bad.ts:1', 'cmp/bad.ts:2', 'cmp/bad.ts:3', 'cmp/bad.ts:6', 'cmp/bad.ts:9'],
    );
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});
