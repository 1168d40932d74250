import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runCommand } from '../../cmp/exec/run-command.js';
import { BUILT_TRACER, ReadRecorder, tracerWorks } from '../../cmp/trace/read-recorder.js';
import { fmt, median } from './stats.js';
import { row, type BenchOptions, type Row } from './types.js';

/**
 * What the trace-overhead scenarios share: a command run plainly and under the traced cache's read
 * recorder (cmp-trace; recording includes parsing the trace), with CMP_OFFLOAD_TRACE_CPUS=one and all,
 * runs interleaved, medians compared against the 15 % target. A recording that fell back (incomplete:
 * the cache would not reuse the answer) makes its row a miss that says so: it measures nothing.
 */
export interface Workload {
  name: string;
  cwd: string;
  argv: string[];
  env?: Record<string, string>;
  /** Files (relative to the root) the command reads: a complete record that lacks one is reported as short. */
  reads?: string[];
}

const recorder = (cpus: 'one' | 'all') => ({ tracer: '', cpus, maxPaths: 100_000, maxTraceBytes: 512 * 1024 ** 2 });

/** One run: plain, or recorded with CMP_OFFLOAD_TRACE_CPUS=one (the default) or all. */
type Mode = 'plain' | 'one' | 'all';

/** How a recorded run ended: the paths it recorded (and expected files it lacks), or why it fell back. */
type Outcome = { paths: number; lacks: string[] } | { fallback: string };

async function once(root: string, w: Workload, mode: Mode): Promise<{ ms: number; outcome?: Outcome }> {
  const start = process.hrtime.bigint();
  const rec = mode === 'plain' ? undefined : await ReadRecorder.start(recorder(mode), root, process.env);
  await runCommand({
    argv: w.argv,
    cwd: w.cwd,
    env: Object.entries({ ...process.env, ...w.env }).map(([k, v]) => `${k}=${v}`),
    ctx: { signal: new AbortController().signal, deadline: undefined },
    execTimeoutMs: 0,
    fatalTimeoutMs: 0,
    maxOutputBytes: 1e9,
    wrap: rec ? (argv, file, cwd) => rec.wrap(argv, file, cwd) : undefined,
  });
  const reads = await rec?.finish();
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  if (!reads) return { ms };
  if (!reads.complete) return { ms, outcome: { fallback: reads.reason } };
  const touched = new Set(reads.touched);
  return { ms, outcome: { paths: new Set([...reads.touched, ...reads.listed]).size, lacks: (w.reads ?? []).filter(f => !touched.has(f)) } };
}

/**
 * A scenario's rows: the workloads `make` writes into a fresh temporary root, two rows each (recorded median
 * against plain median, in %, for CMP_OFFLOAD_TRACE_CPUS=one and all). None where cmp-trace cannot run.
 */
export async function overheadRows(opts: BenchOptions, scenario: string, make: (root: string) => Workload[], reps: number, note?: string): Promise<Row[]> {
  if (!(await tracerWorks(BUILT_TRACER, process.env))) {
    opts.log('  cmp-trace is not usable here: scenario skipped');
    return [];
  }
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'trace-bench-'));
  try {
    return await measure(opts, scenario, root, make(root), reps, note);
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
}

async function measure(opts: BenchOptions, scenario: string, root: string, list: Workload[], reps: number, note?: string): Promise<Row[]> {
  const rows: Row[] = [];
  for (const w of list) {
    const modes: Mode[] = ['plain', 'one', 'all'];
    for (const m of modes) await once(root, w, m);
    const times: Record<Mode, number[]> = { plain: [], one: [], all: [] };
    const outcomes: Record<'one' | 'all', Outcome[]> = { one: [], all: [] };
    for (let i = 0; i < reps; i++) {
      for (const m of modes) {
        const r = await once(root, w, m);
        times[m].push(r.ms);
        if (m !== 'plain') outcomes[m].push(r.outcome!);
      }
    }
    const p = median(times.plain);
    for (const m of ['one', 'all'] as const) {
      const t = median(times[m]);
      const read = verdict(w, outcomes[m]);
      opts.log(`  ${w.name}, CMP_OFFLOAD_TRACE_CPUS=${m}: plain ${p.toFixed(0)} ms, recorded ${t.toFixed(0)} ms, ${read.text}`);
      const r = row({
        scenario,
        case: `${w.name}, CMP_OFFLOAD_TRACE_CPUS=${m}${m === 'one' ? ' (default)' : ''} (median of ${reps})`,
        measured: `recorded ${fmt.ms(t)}; ${read.text}`,
        baseline: `plain ${fmt.ms(p)}`,
        value: Math.round(((t - p) / p) * 100),
        unit: '%',
        target: { op: '<=', value: 15 },
        details: { plain: times.plain, traced: times[m], recorded: outcomes[m] },
        ...(note ? { note } : {}),
      });
      rows.push(read.ok ? r : { ...r, met: false });
    }
  }
  return rows;
}

/** What the recorded runs of a row say about its read set: a row whose recording fell back or fell short measures nothing. */
function verdict(w: Workload, outcomes: Outcome[]): { ok: boolean; text: string } {
  for (const o of outcomes) if ('fallback' in o) return { ok: false, text: `recording fell back (${o.fallback}): measures nothing` };
  const done = outcomes.filter(o => 'paths' in o);
  const lacks = [...new Set(done.flatMap(o => o.lacks))];
  if (lacks.length) return { ok: false, text: `record lacks ${lacks.length} of the ${w.reads!.length} files read (${lacks[0]}): measures nothing` };
  const paths = Math.max(...done.map(o => o.paths));
  return { ok: true, text: `record complete, ${paths} paths${w.reads ? ` (all ${w.reads.length} files read)` : ''}` };
}
