/**
 * `npm run test:reliability [-- --reduced]`: the reliability suites (load with worker kills,
 * Redis restart, hostile input, the fault matrix), one after the other, under node:test. `--reduced` (CI) runs
 * fewer calls with the same checks. Prints the figures each suite recorded.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const reduced = args.includes('--reduced');
const unknown = args.filter(a => a !== '--reduced');
if (unknown.length) {
  process.stderr.write('usage: test:reliability [--reduced]\n');
  process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const suites = fs.readdirSync(here).filter(f => f.endsWith('.suite.js')).sort().map(f => path.join(here, f));
const figures = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-rel-figures-')), 'figures.jsonl');
const started = Date.now();
const res = spawnSync(process.execPath, ['--enable-source-maps', '--test', '--test-concurrency=1', ...suites], {
  stdio: 'inherit',
  env: { ...process.env, CMP_RELIABILITY_REDUCED: reduced ? '1' : '0', CMP_RELIABILITY_FIGURES: figures },
});
process.stdout.write(`\nreliability (${reduced ? 'reduced' : 'full'}) figures, ${((Date.now() - started) / 1000).toFixed(0)} s:\n`);
if (fs.existsSync(figures)) process.stdout.write(fs.readFileSync(figures, 'utf8'));
fs.rmSync(path.dirname(figures), { recursive: true, force: true });
process.exitCode = res.status ?? 1;
