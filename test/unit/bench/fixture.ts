import type { BenchRecord } from '../../../bench/lib/records.js';
import type { Row } from '../../../bench/lib/types.js';

/** A bench row with only what the records and the compare table read. */
export function benchRow(scenario: string, kase: string, value: number, unit: string, met = true): Row {
  return { scenario, case: kase, measured: '', baseline: '', value, unit, target: { op: '<=', value: 0 }, met, details: {} };
}

/** A bench record of `rows`, run on `commit`. */
export function benchRecord(commit: string, rows: Row[], more: Partial<BenchRecord> = {}): BenchRecord {
  const date = more.date ?? '2026-12-03T13:28:31.309Z';
  return {
    commit,
    dirty: false,
    date,
    node: 'v20.20.2',
    mode: 'full',
    environment: {
      date, cpu: 'AMD EPYC', cores: 2, memory: '24 GiB', os: 'Linux', node: 'v20.20.2', redis: '7.0.15',
      gnuTar: 'tar (GNU tar) 1.34', loadAverage: 1.4,
    },
    durationSeconds: 945,
    rows,
    errors: [],
    ...more,
  };
}
