import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { renderConfigurationDoc, withReadmeSettings } from '../../../cmp/config/settings-doc.js';
import { REPO_ROOT } from '../../helpers/paths.js';

const read = (p: string) => fs.readFileSync(path.join(REPO_ROOT, p), 'utf8');

test('docs/configuration.md is what `npm run docs:config` writes from the settings table', () => {
  assert.ok(read('docs/configuration.md') === renderConfigurationDoc(), 'docs/configuration.md is stale: run `npm run docs:config` and commit it');
});

test("README.md's main settings are what `npm run docs:config` writes from the settings table", () => {
  const readme = read('README.md');
  assert.ok(readme === withReadmeSettings(readme), "README.md's main settings are stale: run `npm run docs:config` and commit it");
});
