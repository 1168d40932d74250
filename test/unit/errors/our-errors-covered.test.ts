import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { OUR_ERRORS } from '../../../cmp/errors.js';
import { REPO_ROOT } from '../../helpers/paths.js';

/**
 * Every entry of OUR_ERRORS is provoked by a behavioural test: one under test/e2e, integration,
 * security or reliability (real proxy, worker, runner and Redis processes) that checks what the
 * service answered with `assertOurError('<entry>', …)` (test/helpers/our-errors.ts: the status
 * code and the whole text). A unit test formatting the text does not count.
 */
const BEHAVIOURAL = ['e2e', 'integration', 'security', 'reliability'];

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter(e => e.isFile() && e.name.endsWith('.ts'))
    .map(e => path.join(e.parentPath, e.name));
}

test('every entry of OUR_ERRORS is checked by a behavioural test with assertOurError', () => {
  const covered = new Map<string, string[]>();
  for (const dir of BEHAVIOURAL) {
    for (const file of sources(path.join(REPO_ROOT, 'test', dir))) {
      for (const m of fs.readFileSync(file, 'utf8').matchAll(/\bassertOurError\(\s*'(\w+)'/g)) {
        const files = covered.get(m[1]!) ?? [];
        covered.set(m[1]!, [...files, path.relative(REPO_ROOT, file)]);
      }
    }
  }
  for (const name of covered.keys()) assert.ok(name in OUR_ERRORS, `assertOurError('${name}') names no entry of OUR_ERRORS`);
  const uncovered = Object.keys(OUR_ERRORS).filter(name => !covered.has(name));
  assert.deepEqual(uncovered, [], 'entries of OUR_ERRORS that no behavioural test provokes');
});
