/**
 * `npm run bench [-- --quick] [--only a,b] [--write] [--profile]`: run the scenarios of bench/scenarios
 * and print the table. A full run (or any run with --write) writes the table between the bench markers
 * of docs/performance.md and appends its record to bench/results.json; other runs write
 * bench/out/results-partial.json only. `node dist/bench/run.js --compare A [B]` prints two records side
 * by side and runs nothing. `--help` says more (bench/lib/cli.ts).
 * A run needs a build (`npm run bench` does it) and redis-server on PATH.
 */
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../test/helpers/paths.js';
import { parseArgs, usage, type BenchCommand } from './lib/cli.js';
import { compareTable } from './lib/compare.js';
import { environment } from './lib/environment.js';
import { gitRevision, label, latestRecord, readRecords, resolveRecord, toRecord, withRecord, writeRecords } from './lib/records.js';
import { markdownTable, replaceBenchTable, writeBenchTable, type Results } from './lib/report.js';
import type { BenchOptions, Row } from './lib/types.js';
import { SCENARIOS } from './scenarios/index.js';

const RECORDS = path.join(REPO_ROOT, 'bench', 'results.json');
const PAGE = path.join(REPO_ROOT, 'docs', 'performance.md');
const names = SCENARIOS.map(s => s.name);

function fail(message: string): never {
  process.stderr.write(`bench: ${message}\n`);
  process.exit(2);
}

let cmd: BenchCommand;
try {
  cmd = parseArgs(process.argv.slice(2), names);
} catch (err) {
  fail(`${(err as Error).message}\n${usage(names)}`);
}
if (cmd.kind === 'help') {
  process.stdout.write(`${usage(names)}\n`);
  process.exit(0);
}
if (cmd.kind === 'compare') {
  try {
    const records = readRecords(RECORDS);
    const a = resolveRecord(records, cmd.a);
    const b = cmd.b ? resolveRecord(records, cmd.b) : latestRecord(records);
    process.stdout.write(`${compareTable(a, b)}\n`);
    process.exit(0);
  } catch (err) {
    fail((err as Error).message.split('\n')[0]!);
  }
}
const run = cmd;
const write = run.write || (!run.quick && !run.only);
const rev = gitRevision(REPO_ROOT);
if (write) {
  // Before minutes of measuring, not after: the page must have its markers and the records must parse.
  try {
    replaceBenchTable(fs.readFileSync(PAGE, 'utf8'), '', 'docs/performance.md');
    readRecords(RECORDS);
  } catch (err) {
    fail((err as Error).message.split('\n')[0]!);
  }
}

// The proxies of every scenario run as one process, as the rows measured before proxy processes
// existed (and the per-process figures, /proc CPU and RSS of one pid, need): storm-large sets
// CMP_OFFLOAD_PROXY_PROCESSES itself for its rows with 1 and 2.
process.env.CMP_OFFLOAD_PROXY_PROCESSES ??= '1';

const opts: BenchOptions = {
  quick: run.quick,
  profile: run.profile,
  outDir: path.join(REPO_ROOT, 'bench', 'out'),
  log: line => process.stderr.write(`  ${line}\n`),
};
fs.mkdirSync(opts.outDir, { recursive: true });

const started = Date.now();
const rows: Row[] = [];
const errors: Results['errors'] = [];
for (const s of SCENARIOS.filter(s => !run.only || run.only.includes(s.name))) {
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
  ...(run.only ? { only: run.only } : {}),
};
const table = markdownTable(results);
process.stdout.write(`${table}\n`);
const record = toRecord(results, rev);
if (write) {
  writeRecords(RECORDS, withRecord(readRecords(RECORDS), record));
  writeBenchTable(PAGE, table);
  process.stderr.write(`wrote the table to docs/performance.md and the record ${label(record)} to bench/results.json\n`);
} else {
  fs.writeFileSync(path.join(opts.outDir, 'results-partial.json'), JSON.stringify(record, null, 2) + '\n');
  process.stderr.write('wrote bench/out/results-partial.json (--write puts it in bench/results.json and docs/performance.md)\n');
}
// Exit even if a failed scenario left a handle open (a child or a client): the results are written.
process.exit(errors.length ? 1 : 0);
