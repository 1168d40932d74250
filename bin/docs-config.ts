import fs from 'node:fs';
import { renderConfigurationDoc } from '../cmp/config/settings-doc.js';

/** `npm run docs:config`: write docs/configuration.md from the settings table. */
const target = new URL('../../docs/configuration.md', import.meta.url);
fs.writeFileSync(target, renderConfigurationDoc());
process.stdout.write(`wrote ${target.pathname}\n`);
