import fs from 'node:fs';
import path from 'node:path';
import * as yaml from 'js-yaml';
import { appName, KUSTOMIZE_LIKE, monorepoFiles } from '../../test/helpers/monorepo.js';
import { overheadRows, type Workload } from '../lib/trace-overhead.js';
import type { Scenario } from '../lib/types.js';

/**
 * Overhead of the traced cache's read recorder (cmp-trace: seccomp user notifications) on three synthetic
 * worst cases, plain vs recorded (bench/lib/trace-overhead.ts; trace-overhead-real has the real tools):
 *   helm-like:      one statically linked Go process reading many files (`buf build` over 400 protos)
 *   kustomize-like: a shell pipeline per app dir: ls, cat, find, probes of absent files (40 dirs)
 *   storm plugin:   the kustomize-like plugin of the storm-whole-repo scenario on one app that reads base/
 */
const BUF = path.resolve('node_modules/@bufbuild/buf-linux-x64/bin/buf');
const KZ = `for d in app*; do ls "$d" >/dev/null; for f in "$d"/*.yaml; do cat "$f"; done | sort | uniq >/dev/null;
find "$d/overlays" -name '*.yaml' -exec cat {} + >/dev/null; [ -f "$d/values-prod.yaml" ] && cat "$d/values-prod.yaml"; done; echo done`;

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

export const traceOverhead: Scenario = {
  name: 'trace-overhead',
  title: 'traced cache recorder (cmp-trace, records parsed; CMP_OFFLOAD_TRACE_CPUS=one and all) vs the same command run plainly, interleaved: synthetic worst cases',
  run: opts => overheadRows(opts, 'trace-overhead', workloads, opts.quick ? 1 : 9, 'synthetic worst case'),
};
