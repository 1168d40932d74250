import { label, type BenchRecord } from './records.js';
import { figure } from './report.js';
import type { Row } from './types.js';

/**
 * A row's case without its parenthesised parts: they hold the figures of the run (`(12.7× faster)`,
 * `(median of 9)`), which would keep the same case of two runs apart.
 */
export function caseKey(c: string): string {
  let out = '';
  let depth = 0;
  for (const ch of c) {
    if (ch === '(') depth++;
    else if (ch === ')' && depth > 0) depth--;
    else if (depth === 0) out += ch;
  }
  return out.replace(/\s+/g, ' ').replace(/ ([,;:.])/g, '$1').trim();
}

/** A record's rows by scenario and case key; a key that recurs within the record gets ` #2`, ` #3`… */
function keyed(rows: readonly Row[]): Map<string, Row> {
  const out = new Map<string, Row>();
  for (const r of rows) {
    const base = `${r.scenario} | ${caseKey(r.case)}`;
    let key = base;
    for (let n = 2; out.has(key); n++) key = `${base} #${n}`;
    out.set(key, r);
  }
  return out;
}

/** `B − A` with the unit, and B's change relative to A in percent (for `%` rows only the points). */
export function delta(a: Row, b: Row): string {
  if (a.unit !== b.unit) return `units differ (${a.unit || 'none'}, ${b.unit || 'none'})`;
  const d = b.value - a.value;
  const abs = figure(Math.abs(d), a.unit === '%' ? 'pt' : a.unit);
  const zero = Number.parseFloat(abs) === 0;
  const diff = `${zero ? '' : d > 0 ? '+' : '-'}${abs}`;
  if (a.unit === '%' || a.value <= 0 || zero) return diff;
  const rel = Math.round((b.value / a.value - 1) * 100);
  return `${diff} (${rel > 0 ? '+' : ''}${rel} %)`;
}

const result = (r: Row) => `${figure(r.value, r.unit)}${r.met ? '' : ' (missed)'}`;
const cell = (s: string) => s.replaceAll('|', '\\|');

/** What a side shows for a row it lacks: its scenario failed, or it has no such row. */
const absent = (rec: BenchRecord, scenario: string) => (rec.errors.some(e => e.scenario === scenario) ? 'failed' : '—');

function describe(name: string, r: BenchRecord): string {
  const e = r.environment;
  const only = r.only ? ` of ${r.only.join(',')}` : '';
  return `${name}: ${label(r)}, ${r.mode} run${only} of ${r.date.slice(0, 16).replace('T', ' ')} UTC, Node ${r.node}, ` +
    `${e.cpu} (${e.cores} cores), load average ${e.loadAverage ?? '?'}`;
}

/**
 * Two records' rows side by side as Markdown: B's rows in its order, then the rows only A has.
 * Rows are matched by scenario and case key (see `caseKey`); a row one side lacks shows `—`
 * (`failed` if its scenario failed there). Scenarios that an `--only` run of either side left out
 * are not shown.
 */
export function compareTable(a: BenchRecord, b: BenchRecord): string {
  const rowsA = keyed(a.rows);
  const rowsB = keyed(b.rows);
  // An --only run says nothing of the scenarios it left out: their rows are not compared.
  const ran = (r: BenchRecord, row: Row) => !r.only || r.only.includes(row.scenario);
  const both = (row: Row) => ran(a, row) && ran(b, row);
  const keys = [...rowsB.keys(), ...[...rowsA.keys()].filter(k => !rowsB.has(k))].filter(k => both((rowsB.get(k) ?? rowsA.get(k))!));
  const lines = [describe('A', a), describe('B', b)];
  if (a.mode !== b.mode) lines.push(`A is a ${a.mode} run and B a ${b.mode} run: their inputs differ, and so do most cases.`);
  lines.push('', `| scenario | case | A: ${label(a)} | B: ${label(b)} | B − A |`, '|---|---|---|---|---|');
  for (const k of keys) {
    const ra = rowsA.get(k);
    const rb = rowsB.get(k);
    const scenario = (rb ?? ra)!.scenario;
    const c = k.slice(scenario.length + 3);
    lines.push(
      `| ${scenario} | ${cell(c)} | ${ra ? result(ra) : absent(a, scenario)} | ${rb ? result(rb) : absent(b, scenario)} | ` +
        `${ra && rb ? delta(ra, rb) : ''} |`,
    );
  }
  const failed = ([['A', a], ['B', b]] as const).flatMap(([name, r]) => r.errors.map(e => `${name}: ${e.scenario} failed: ${e.message}`));
  if (failed.length) lines.push('', ...failed);
  return lines.join('\n');
}
