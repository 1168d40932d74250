import fs from 'node:fs';
import { renderConfigurationDoc, withReadmeSettings } from '../cmp/config/settings-doc.js';

/** `npm run docs:config`: write docs/configuration.md and README.md's main settings from the settings table. */
const page = new URL('../../docs/configuration.md', import.meta.url);
fs.writeFileSync(page, renderConfigurationDoc());
const readme = new URL('../../README.md', import.meta.url);
fs.writeFileSync(readme, withReadmeSettings(fs.readFileSync(readme, 'utf8')));
process.stdout.write(`wrote ${page.pathname} and the main settings of ${readme.pathname}\n`);
