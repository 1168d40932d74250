import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { REPO_ROOT, SOURCE_ROOTS, importSpecifiers, tsFilesUnder } from '../../helpers/paths.js';

/**
 * No import cycle anywhere in the tree (type-only imports included): configuration at the
 * bottom, each layer importing only below itself. A cycle makes load order matter and hides
 * which module depends on which.
 */

const ROOTS = [...SOURCE_ROOTS, 'bench', 'proto/generated', 'test'];

/** Relative imports of every .ts file under the roots of `root`: file → the files it imports. */
export function importGraph(root: string): Map<string, string[]> {
  const files = tsFilesUnder(root, ROOTS);
  const graph = new Map<string, string[]>();
  for (const f of files) {
    const deps: string[] = [];
    for (const spec of importSpecifiers(f).filter(s => s.startsWith('.'))) {
      const target = path.join(path.dirname(f), spec).replace(/\.js$/, '.ts');
      if (fs.existsSync(target)) deps.push(path.relative(root, target));
    }
    graph.set(path.relative(root, f), deps);
  }
  return graph;
}

/** The strongly connected components with more than one file, or a file importing itself (Tarjan). */
export function cycles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

test('no import cycle in the tree (cmp, proxy, worker, bin, bench, proto, test)', () => {
  const graph = importGraph(REPO_ROOT);
  assert.ok(graph.size > 300, `only ${graph.size} files read`);
  assert.deepEqual(cycles(graph), []);
});

test('the cycle check can fail: a type-only import back, and a dynamic import back', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-cycles-'));
  try {
    fs.mkdirSync(path.join(root, 'cmp', 'config'), { recursive: true });
    fs.mkdirSync(path.join(root, 'cmp', 'cache'), { recursive: true });
    fs.writeFileSync(path.join(root, 'cmp/config/options.ts'), "import type { Rule } from '../cache/key.js';\nexport const x = 1;\n");
    fs.writeFileSync(path.join(root, 'cmp/cache/key.ts'), "import { x } from '../config/options.js';\nexport type Rule = 'a';\n");
    fs.writeFileSync(path.join(root, 'cmp/cache/lone.ts'), "export const y = async () => import('./lone.js');\n");
    assert.deepEqual(cycles(importGraph(root)), [['cmp/cache/key.ts', 'cmp/config/options.ts'], ['cmp/cache/lone.ts']]);
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});
