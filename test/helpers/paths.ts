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

export const BIN = path.join(REPO_ROOT, 'bin', 'cmp-offload');

export function fixturePath(...parts: string[]): string {
  return path.join(REPO_ROOT, 'test', 'fixtures', ...parts);
}
