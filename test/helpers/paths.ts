import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root, whether tests run from sources (tsx) or from dist/ (npm test). */
export const REPO_ROOT = (() => {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!fs.existsSync(path.join(dir, 'package.json'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error('package.json not found above the test helpers');
    dir = up;
  }
  return dir;
})();

/** The product's source folders: its roles (proxy, worker, runner, keeper, cli), the libraries they share (cmp), and bin/. */
export const SOURCE_ROOTS = ['proxy', 'worker', 'runner', 'keeper', 'cli', 'cmp', 'bin'] as const;

export const BIN = path.join(REPO_ROOT, 'bin', 'cmp-offload');

export function fixturePath(...parts: string[]): string {
  return path.join(REPO_ROOT, 'test', 'fixtures', ...parts);
}

/** The .ts sources (not .d.ts) under each of `roots` (folders of `root`; missing ones skipped), sorted. */
export function tsFilesUnder(root: string, roots: readonly string[]): string[] {
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (p.endsWith('.ts') && !p.endsWith('.d.ts')) files.push(p);
    }
  };
  for (const r of roots) if (fs.existsSync(path.join(root, r))) walk(path.join(root, r));
  return files.sort();
}

const IMPORT_SPEC = /(?:^|\n)\s*(?:import|export)\s[^'";]*?from\s+['"]([^'"]+)['"]|(?:^|\n)\s*import\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g;

/** Every import specifier of a source file as written: static, side-effect and dynamic imports, type-only ones included. */
export function importSpecifiers(file: string): string[] {
  return [...fs.readFileSync(file, 'utf8').matchAll(IMPORT_SPEC)].map(m => (m[1] ?? m[2] ?? m[3])!);
}
