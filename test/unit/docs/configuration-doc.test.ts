import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { renderConfigurationDoc } from '../../../cmp/config/settings-doc.js';
import { REPO_ROOT } from '../../helpers/paths.js';

test('docs/configuration.md is what `npm run docs:config` writes from the settings table', () => {
  const committed = fs.readFileSync(path.join(REPO_ROOT, 'docs', 'configuration.md'), 'utf8');
  assert.ok(committed === renderConfigurationDoc(), 'docs/configuration.md is stale: run `npm run docs:config` and commit it');
});
