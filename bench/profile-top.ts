/**
 * Summarise V8 CPU profiles (`npm run bench -- --only X --profile` writes them to
 * bench/out/profiles/<scenario>/): self time by package/area and the top functions.
 * `node dist/bench/profile-top.js <file.cpuprofile>...`
 */
import fs from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
}

/** Which package or part of the code a function belongs to. */
function areaOf(url: string, fn: string): string {
  if (fn === '(idle)' || fn === '(program)' || fn === '(garbage collector)') return fn;
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  const ours = /\/dist\/([^/]+\/(?:[^/]+\/)?)/.exec(url);
  if (ours) return `cmp-offload ${ours[1]}`;
  if (url.startsWith('node:')) return url.split('/')[0]!.replace(/^node:internal.*/, 'node internals');
  return url ? 'other' : '(native)';
}

for (const file of process.argv.slice(2)) {
  const p = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(p.nodes.map(n => [n.id, n]));
  const area = new Map<string, number>();
  const fns = new Map<string, number>();
  let total = 0;
  p.samples.forEach((id, i) => {
    const n = byId.get(id)!;
    const dt = p.timeDeltas[i] ?? 0;
    total += dt;
    const { functionName, url, lineNumber } = n.callFrame;
    const a = areaOf(url, functionName);
    area.set(a, (area.get(a) ?? 0) + dt);
    const key = `${functionName || '(anonymous)'} ${url.replace(/^.*\/(node_modules|dist)\//, '$1/')}:${lineNumber + 1}`;
    fns.set(key, (fns.get(key) ?? 0) + dt);
  });
  const busy = total - (area.get('(idle)') ?? 0);
  const pct = (v: number) => `${((100 * v) / busy).toFixed(1).padStart(5)}%`;
  process.stdout.write(`\n${file}: ${(total / 1e6).toFixed(1)} s sampled, ${(busy / 1e6).toFixed(1)} s busy\n`);
  for (const [a, v] of [...area].filter(([a]) => a !== '(idle)').sort((x, y) => y[1] - x[1]).slice(0, 10)) process.stdout.write(`  ${pct(v)}  ${a}\n`);
  process.stdout.write('  top functions (self):\n');
  for (const [f, v] of [...fns].filter(([f]) => !f.startsWith('(idle)')).sort((x, y) => y[1] - x[1]).slice(0, 12)) process.stdout.write(`  ${pct(v)}  ${f}\n`);
}
