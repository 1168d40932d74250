/**
 * `npm run bench [-- --quick] [--only a,b] [--profile]`: run the scenarios of bench/scenarios,
 * print the table, write bench/results.json and the table between the bench markers of docs/performance.md.
 * A run with --only writes bench/out/results-partial.json instead and leaves docs/performance.md alone.
 * Needs a build (`npm run bench` does it) and redis-server on PATH.
 */
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../test/helpers/paths.js';
import { environment } from './lib/environment.js';
import { markdownTable, writeBenchTable, type Results } from './lib/report.js';
import type { BenchOptions, Row } from './lib/types.js';
import { SCENARIOS } from './scenarios/index.js';

const args = process.argv.slice(2);
const flag = (name: string) => args.includes(name);
const onlyArg = args[args.indexOf('--only') + 1];
const only = flag('--only') && onlyArg ? new Set(onlyArg.split(',')) : undefined;
const unknown = args.filter((a, i) => !['--quick', '--profile', '--only'].includes(a) && args[i - 1] !== '--only');
if (unknown.length || (only && [...only].some(n => !SCENARIOS.some(s => s.name === n)))) {
  process.stderr.write(`usage: bench [--quick] [--profile] [--only ${SCENARIOS.map(s => s.name).join(',')}]\n`);
  process.exit(2);
}

// The proxies of every scenario run as one process, as the rows measured before proxy processes
// existed (and the per-process figures, /proc CPU and RSS of one pid, need): storm-large sets
// CMP_OFFLOAD_PROXY_PROCESSES itself for its rows with 1 and 2.
process.env.CMP_OFFLOAD_PROXY_PROCESSES ??= '1';

const opts: BenchOptions = {
  quick: flag('--quick'),
  profile: flag('--profile'),
  outDir: path.join(REPO_ROOT, 'bench', 'out'),
  log: line => process.stderr.write(`  ${line}\n`),
};
fs.mkdirSync(opts.outDir, { recursive: true });

const started = Date.now();
const rows: Row[] = [];
const errors: Results['errors'] = [];
for (const s of SCENARIOS.filter(s => !only || only.has(s.name))) {
  process.stderr.write(`${s.name}: ${s.title}\n`);
  const t = Date.now();
  try {
    rows.push(...(await s.run(opts)));
  } catch (err) {
    errors.push({ scenario: s.name, message: err instanceof Error ? err.message.split('\n')[0]! : String(err) });
    process.stderr.write(`  FAILED: ${err instanceof Error ? err.stack : String(err)}\n`);
  }
  process.stderr.write(`  (${((Date.now() - t) / 1000).toFixed(1)} s)\n`);
}

const results: Results = {
  mode: opts.quick ? 'quick' : 'full',
  environment: environment(),
  durationSeconds: (Date.now() - started) / 1000,
  rows,
  errors,
};
const table = markdownTable(results);
process.stdout.write(`${table}\n`);
if (only) {
  fs.writeFileSync(path.join(opts.outDir, 'results-partial.json'), JSON.stringify(results, null, 2) + '\n');
} else {
  fs.writeFileSync(path.join(REPO_ROOT, 'bench', 'results.json'), JSON.stringify(results, null, 2) + '\n');
  writeBenchTable(path.join(REPO_ROOT, 'docs', 'performance.md'), table);
}
// Exit even if a failed scenario left a handle open (a child or a client): the results are written.
process.exit(errors.length ? 1 : 0);
