/**
 * Overhead of the traced cache's read recorder (strace -f --seccomp-bpf) on two workloads,
 * plain vs recorded (recording includes parsing the trace), runs interleaved:
 *   helm-like:      one statically linked Go process reading many files (buf build over 400 protos)
 *   kustomize-like: a shell pipeline per app dir: ls, cat, find, probes of absent files (40 dirs)
 * Usage: npx tsx bench/trace-overhead.ts [reps]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runCommand } from '../cmp/exec/run-command.js';
import { ReadRecorder } from '../cmp/trace/read-recorder.js';

const reps = Number(process.argv[2] ?? 10);
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'trace-bench-'));
const buf = path.resolve('node_modules/@bufbuild/buf-linux-x64/bin/buf');

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
const KZ = `for d in app*; do ls "$d" >/dev/null; for f in "$d"/*.yaml; do cat "$f"; done | sort | uniq >/dev/null;
find "$d/overlays" -name '*.yaml' -exec cat {} + >/dev/null; [ -f "$d/values-prod.yaml" ] && cat "$d/values-prod.yaml"; done; echo done`;

const workloads = [
  { name: 'helm-like (Go static binary, 400 files)', cwd: path.join(root, 'helm'), argv: [buf, 'build', '-o', '/dev/null'] },
  { name: 'kustomize-like (sh, 40 dirs, ~500 processes)', cwd: path.join(root, 'kz'), argv: ['sh', '-c', KZ] },
];
const env = Object.entries(process.env).map(([k, v]) => `${k}=${v}`);
const opts = { strace: 'strace', maxPaths: 100_000, maxTraceBytes: 512 * 1024 ** 2 };

async function once(w: (typeof workloads)[number], traced: boolean): Promise<{ ms: number; paths: number }> {
  const start = process.hrtime.bigint();
  const rec = traced ? await ReadRecorder.start(opts, root, process.env) : undefined;
  await runCommand({
    argv: w.argv, cwd: w.cwd, env, ctx: { signal: new AbortController().signal, deadline: undefined },
    execTimeoutMs: 0, fatalTimeoutMs: 0, maxOutputBytes: 1e9,
    wrap: rec ? (argv, file, cwd, e) => rec.wrap(argv, file, cwd, e, process.env.PATH ?? '') : undefined,
  });
  const reads = await rec?.finish();
  if (reads && !reads.complete) throw new Error(`incomplete: ${reads.reason}`);
  return { ms: Number(process.hrtime.bigint() - start) / 1e6, paths: reads?.complete ? reads.touched.length : 0 };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
for (const w of workloads) {
  await once(w, false);
  await once(w, true);
  const plain: number[] = [];
  const traced: number[] = [];
  let paths = 0;
  for (let i = 0; i < reps; i++) {
    plain.push((await once(w, false)).ms);
    const t = await once(w, true);
    traced.push(t.ms);
    paths = t.paths;
  }
  const p = median(plain);
  const t = median(traced);
  console.log(`${w.name}: plain ${p.toFixed(0)} ms, recorded ${t.toFixed(0)} ms, overhead ${(((t - p) / p) * 100).toFixed(0)}% (${paths} paths under the root)`);
}
fs.rmSync(root, { recursive: true, force: true });
