import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { REPO_ROOT } from '../../helpers/paths.js';

const readme = fs.readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8').split('\n');

test('README.md is at most 300 lines and has the quick start on its first screen', () => {
  assert.ok(readme.length <= 300, `README.md has ${readme.length} lines`);
  const firstScreen = readme.slice(0, 50).join('\n');
  for (const command of ['npm install && npm start', 'bin/cmp-offload generate examples/repo', 'npm test']) {
    assert.ok(firstScreen.includes(command), `the first 50 lines of README.md do not show ${command}`);
  }
});
