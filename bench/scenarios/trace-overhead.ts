import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as yaml from 'js-yaml';
import { runCommand } from '../../cmp/exec/run-command.js';
import { BUILT_TRACER, ReadRecorder, tracerWorks } from '../../cmp/trace/read-recorder.js';
import { appName, KUSTOMIZE_LIKE, monorepoFiles } from '../../test/helpers/monorepo.js';
import { fmt, median } from '../lib/stats.js';
import { row, type Row, type Scenario } from '../lib/types.js';

/**
 * Overhead of the traced cache's read recorder (cmp-trace: seccomp user notifications) on three workloads,
 * plain vs recorded (recording includes parsing the trace), runs interleaved:
 *   helm-like:      one statically linked Go process reading many files (`buf build` over 400 protos)
 *   kustomize-like: a shell pipeline per app dir: ls, cat, find, probes of absent files (40 dirs)
 *   storm plugin:   the kustomize-like plugin of the storm-whole-repo scenario on one app that reads base/
 */
const BUF = path.resolve('node_modules/@bufbuild/buf-linux-x64/bin/buf');
const KZ = `for d in app*; do ls "$d" >/dev/null; for f in "$d"/*.yaml; do cat "$f"; done | sort | uniq >/dev/null;
find "$d/overlays" -name '*.yaml' -exec cat {} + >/dev/null; [ -f "$d/values-prod.yaml" ] && cat "$d/values-prod.yaml"; done; echo done`;

interface Workload {
  name: string;
  cwd: string;
  argv: string[];
  env?: Record<string, string>;
}

function workloads(root: string): Workload[] {
  fs.mkdirSync(path.join(root, 'helm'));
  fs.writeFileSync(path.join(root, 'helm/buf.yaml'), 'version: v1\n');
  for (let i = 1; i <= 400; i++) {
    fs.writeFileSync(path.join(root, `helm/f${i}.proto`), `syntax = "proto3";\npackage p${i};\nmessage M${i} { string a = 1; int32 b = 2; repeated string c = 3; }\n`);
  }
  for (let a = 1; a <= 40; a++) {
    fs.mkdirSync(path.join(root, `kz/app${a}/overlays`), { recursive: true });
    for (let f = 1; f <= 10; f++) fs.writeFileSync(path.join(root, `kz/app${a}/r${f}.yaml`), `k${f}: v${a}\n`);
    fs.writeFileSync(path.join(root, `kz/app${a}/overlays/o.yaml`), 'x: 1\n');
  }
  for (const [rel, text] of Object.entries(monorepoFiles(50))) {
    fs.mkdirSync(path.dirname(path.join(root, 'mono', rel)), { recursive: true });
    fs.writeFileSync(path.join(root, 'mono', rel), text);
  }
  const stormScript = (yaml.load(KUSTOMIZE_LIKE) as { generate: { args: string[] } }).generate.args[0]!;
  const list: Workload[] = [
    {
      name: 'storm plugin: the storm-whole-repo scenario\'s sh plugin on one app reading base/ (~10 short processes)',
      cwd: path.join(root, 'mono/apps', appName(5)),
      argv: ['sh', '-c', stormScript],
      env: { COUNTER: path.join(root, 'runs'), ARGOCD_APP_NAME: appName(5) },
    },
    { name: 'kustomize-like: sh over 40 app dirs, ~500 short processes (ls, cat, sort, find)', cwd: path.join(root, 'kz'), argv: ['sh', '-c', KZ] },
  ];
  if (fs.existsSync(BUF)) list.unshift({ name: 'helm-like: one static Go binary reading 400 files (buf build)', cwd: path.join(root, 'helm'), argv: [BUF, 'build', '-o', '/dev/null'] });
  return list;
}

const recorder = (cpus: 'one' | 'all') => ({ tracer: '', cpus, maxPaths: 100_000, maxTraceBytes: 512 * 1024 ** 2 });

/** One run: plain, or recorded with CMP_OFFLOAD_TRACE_CPUS=one (the default) or all. */
type Mode = 'plain' | 'one' | 'all';

async function once(root: string, w: Workload, mode: Mode): Promise<number> {
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
  if (reads && !reads.complete) throw new Error(`recording incomplete: ${reads.reason}`);
  return Number(process.hrtime.bigint() - start) / 1e6;
}

export const traceOverhead: Scenario = {
  name: 'trace-overhead',
  title: 'traced cache recorder (cmp-trace, records parsed; CMP_OFFLOAD_TRACE_CPUS=one and all) vs the same command run plainly, interleaved',
  async run(opts) {
    if (!(await tracerWorks(BUILT_TRACER, process.env))) {
      opts.log('  cmp-trace is not usable here: scenario skipped');
      return [];
    }
    const reps = opts.quick ? 1 : 9;
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'trace-bench-'));
    const rows: Row[] = [];
    try {
      for (const w of workloads(root)) {
        const modes: Mode[] = ['plain', 'one', 'all'];
        for (const m of modes) await once(root, w, m);
        const times: Record<Mode, number[]> = { plain: [], one: [], all: [] };
        for (let i = 0; i < reps; i++) for (const m of modes) times[m].push(await once(root, w, m));
        const p = median(times.plain);
        for (const m of ['one', 'all'] as const) {
          const t = median(times[m]);
          opts.log(`  ${w.name}, CMP_OFFLOAD_TRACE_CPUS=${m}: plain ${p.toFixed(0)} ms, recorded ${t.toFixed(0)} ms`);
          rows.push(
            row({
              scenario: 'trace-overhead',
              case: `${w.name}, CMP_OFFLOAD_TRACE_CPUS=${m}${m === 'one' ? ' (default)' : ''} (median of ${reps})`,
              measured: `recorded ${fmt.ms(t)}`,
              baseline: `plain ${fmt.ms(p)}`,
              value: Math.round(((t - p) / p) * 100),
              unit: '%',
              target: { op: '<=', value: 15 },
              details: { plain: times.plain, traced: times[m] },
            }),
          );
        }
      }
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
    return rows;
  },
};
