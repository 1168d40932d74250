import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Results } from './report.js';

/** One run in bench/results.json: its results and the code they were measured on. */
export interface BenchRecord extends Results {
  /** Abbreviated sha of HEAD when the run started (`unknown` outside a git checkout). */
  commit: string;
  /** The working tree had changes against HEAD (tracked or untracked) when the run started. */
  dirty: boolean;
  /** When the run ended (ISO), as in `environment.date`. */
  date: string;
  /** `process.version` of the run, as in `environment.node`. */
  node: string;
}

/**
 * bench/results.json: the runs that wrote it, oldest first. An array rather than an object keyed by
 * sha: an all-digit sha would be an integer key, which JavaScript orders before the others.
 */
export interface RecordsFile {
  records: BenchRecord[];
}

/** How a record is named on the command line and in tables: the sha, with `-dirty` for a changed tree. */
export const label = (r: Pick<BenchRecord, 'commit' | 'dirty'>): string => `${r.commit}${r.dirty ? '-dirty' : ''}`;

/** HEAD's abbreviated sha and whether the tree has changes, for the record of a run in `repoRoot`. */
export function gitRevision(repoRoot: string): { commit: string; dirty: boolean } {
  const git = (...args: string[]) => execFileSync('git', ['-C', repoRoot, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  try {
    return { commit: git('rev-parse', '--short', 'HEAD').trim(), dirty: git('status', '--porcelain').trim() !== '' };
  } catch {
    return { commit: 'unknown', dirty: true };
  }
}

/** A run's results as the record to keep. */
export function toRecord(results: Results, rev: { commit: string; dirty: boolean }): BenchRecord {
  return { commit: rev.commit, dirty: rev.dirty, date: results.environment.date, node: results.environment.node, ...results };
}

/**
 * The records of a parsed JSON file: a records file, or the results of one run (what
 * bench/out/results-partial.json holds, and bench/results.json held before it kept records),
 * which gets `label` as its commit.
 */
export function recordsOf(json: unknown, fallbackLabel: string): BenchRecord[] {
  const o = json as Partial<RecordsFile & BenchRecord> | null;
  if (o && Array.isArray(o.records)) return o.records;
  if (o && Array.isArray(o.rows) && o.environment) {
    const r = o as Results & Partial<BenchRecord>;
    return [{ ...r, commit: r.commit ?? fallbackLabel, dirty: r.dirty ?? false, date: r.date ?? r.environment.date, node: r.node ?? r.environment.node }];
  }
  throw new Error(`${fallbackLabel} holds neither bench records nor the results of a run`);
}

/** The records of bench/results.json (none if it does not exist). */
export function readRecords(file: string): BenchRecord[] {
  if (!fs.existsSync(file)) return [];
  return recordsOf(JSON.parse(fs.readFileSync(file, 'utf8')), path.basename(file));
}

/**
 * `records` with `record` last: it replaces a record of the same commit and dirty flag, so that
 * a name on the command line means one run and "latest" is the last one.
 */
export function withRecord(records: readonly BenchRecord[], record: BenchRecord): BenchRecord[] {
  return [...records.filter(r => label(r) !== label(record)), record];
}

export function writeRecords(file: string, records: readonly BenchRecord[]): void {
  const body: RecordsFile = { records: [...records] };
  fs.writeFileSync(file, JSON.stringify(body, null, 2) + '\n');
}

/** A record that cannot be found, or a name that fits several: its message is one line. */
export class LookupError extends Error {}

/**
 * The record named by `name`: a commit sha or a prefix of one (4 or more hex digits), with
 * `-dirty` for the run of a changed tree. A plain sha takes the clean record of that commit
 * when there is one, else the dirty one.
 */
export function findRecord(records: readonly BenchRecord[], name: string, source = 'bench/results.json'): BenchRecord {
  const known = () => (records.length ? records.map(label).join(', ') : 'none');
  const m = /^([0-9a-f]{4,40})(-dirty)?$/i.exec(name);
  if (!m) throw new LookupError(`${name} is neither a commit (4 to 40 hex digits, optionally -dirty) nor a .json file`);
  const sha = m[1]!.toLowerCase();
  const fits = records.filter(r => (r.commit.startsWith(sha) || sha.startsWith(r.commit)) && (!m[2] || r.dirty));
  const commits = [...new Set(fits.map(r => r.commit))];
  if (commits.length === 0) throw new LookupError(`no record for ${name} in ${source}; records: ${known()}`);
  if (commits.length > 1) throw new LookupError(`${name} fits several records in ${source}: ${fits.map(label).join(', ')}; give more digits`);
  return fits.find(r => !r.dirty) ?? fits[0]!;
}

/** The latest record of bench/results.json. */
export function latestRecord(records: readonly BenchRecord[], source = 'bench/results.json'): BenchRecord {
  const r = records.at(-1);
  if (!r) throw new LookupError(`${source} has no records yet: a full \`npm run bench\` writes the first`);
  return r;
}

/**
 * A `--compare` argument: a path (it ends in `.json` or holds a `/`), whose latest record it
 * means, or a commit looked up in `records`.
 */
export function resolveRecord(records: readonly BenchRecord[], arg: string, source = 'bench/results.json'): BenchRecord {
  if (!arg.endsWith('.json') && !arg.includes('/')) return findRecord(records, arg, source);
  if (!fs.existsSync(arg)) throw new LookupError(`no such file: ${arg}`);
  let json: unknown;
  try {
    json = JSON.parse(fs.readFileSync(arg, 'utf8'));
  } catch (err) {
    throw new LookupError(`${arg} is not JSON: ${(err as Error).message.split('\n')[0]}`);
  }
  try {
    return latestRecord(recordsOf(json, path.basename(arg, '.json')), arg);
  } catch (err) {
    throw new LookupError((err as Error).message);
  }
}
