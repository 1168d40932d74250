import fs from 'node:fs';
import type { Environment } from './environment.js';
import type { Row } from './types.js';

export interface Results {
  mode: 'full' | 'quick';
  environment: Environment;
  durationSeconds: number;
  rows: Row[];
  /** Scenarios that threw, with the message. */
  errors: { scenario: string; message: string }[];
  /** The scenarios of an `--only` run; absent when every scenario ran. */
  only?: string[];
}

const OP: Record<Row['target']['op'], string> = { '<=': '≤', '>=': '≥', '<': '<', '==': '=' };

export function figure(value: number, unit: string): string {
  const digits = unit === '×' || unit === '' ? 2 : unit === 'ms' && Math.abs(value) < 100 ? 2 : 0;
  const text = Number.isInteger(value) && unit !== '×' ? String(value) : value.toFixed(digits);
  return unit === '×' ? `${text}×` : unit ? `${text} ${unit}` : text;
}

const cell = (s: string) => s.replaceAll('|', '\\|');

/** The results as a Markdown table with its environment line. */
export function markdownTable(r: Results): string {
  const e = r.environment;
  const lines = [
    `Measured ${e.date.slice(0, 16).replace('T', ' ')} UTC (${r.mode} run${r.only ? ` of ${r.only.join(',')}` : ''}, ${r.durationSeconds.toFixed(0)} s) on ${e.cpu}, ` +
      `${e.cores} cores, ${e.memory} RAM, ${e.os}; Node ${e.node}, Redis ${e.redis}, ${e.gnuTar}; load average ${e.loadAverage ?? '?'} at the end.`,
    '',
    '| scenario | case | cmp-offload | baseline (same run) | result | target | met |',
    '|---|---|---|---|---|---|---|',
    ...r.rows.map(
      x =>
        `| ${x.scenario} | ${cell(x.case)}${x.note ? ` (${cell(x.note)})` : ''} | ${cell(x.measured)} | ${cell(x.baseline)} | ` +
        `${figure(x.value, x.unit)} | ${OP[x.target.op]} ${figure(x.target.value, x.unit)} | ${x.met ? 'met' : '**missed**'} |`,
    ),
    ...r.errors.map(x => `| ${x.scenario} | — | failed: ${cell(x.message)} | | | | **error** |`),
  ];
  return lines.join('\n');
}

export const START = '<!-- bench:start -->';
export const END = '<!-- bench:end -->';

/**
 * `text` with everything between its bench marker lines replaced by `table`, the rest unchanged
 * (the same table twice gives the same text). A marker counts only as a line of its own, so that
 * prose may name it. Throws if the marker lines are missing, out of order or repeated: a run must
 * not guess where the table goes.
 */
export function replaceBenchTable(text: string, table: string, name = 'the page'): string {
  const lines = text.split('\n');
  const starts = lines.flatMap((l, i) => (l === START ? [i] : []));
  const ends = lines.flatMap((l, i) => (l === END ? [i] : []));
  if (starts.length !== 1 || ends.length !== 1 || ends[0]! < starts[0]!) {
    throw new Error(`${name} needs one ${START} line and, after it, one ${END} line around the bench table`);
  }
  return [...lines.slice(0, starts[0]! + 1), table, ...lines.slice(ends[0])].join('\n');
}

/** Replace the table between the bench markers of a page (docs/performance.md); throws as `replaceBenchTable`. */
export function writeBenchTable(pagePath: string, table: string): void {
  fs.writeFileSync(pagePath, replaceBenchTable(fs.readFileSync(pagePath, 'utf8'), table, pagePath));
}
