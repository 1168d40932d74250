import * as yaml from 'js-yaml';
import { splitManifests } from '../../cmp/split/split-manifests.js';
import { fmt, median, MiB, timed } from '../lib/stats.js';
import { rng } from '../../test/helpers/rng.js';
import { row, type Row, type Scenario } from '../lib/types.js';

/** One generated Deployment as a plain object (labels, env, resources, probes: typical shapes). */
function deployment(i: number, rand: () => number): Record<string, unknown> {
  const name = `svc-${i}-${Math.floor(rand() * 1e6).toString(36)}`;
  const labels = { app: name, tier: ['web', 'api', 'worker'][i % 3]!, 'app.kubernetes.io/part-of': 'bench' };
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace: `team-${i % 17}`, labels, annotations: { 'bench/revision': String(i) } },
    spec: {
      replicas: 1 + (i % 5),
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels },
        spec: {
          containers: [
            {
              name: 'main',
              image: `registry.example.com/${name}:v1.${i % 40}.${Math.floor(rand() * 100)}`,
              args: ['--port=8080', `--name=${name}`, '--verbose=true'],
              ports: [{ containerPort: 8080, name: 'http', protocol: 'TCP' }],
              env: Array.from({ length: 6 }, (_, k) => ({ name: `VAR_${k}`, value: `value-${Math.floor(rand() * 1e9)}` })),
              resources: { limits: { cpu: '500m', memory: '256Mi' }, requests: { cpu: '100m', memory: '128Mi' } },
              readinessProbe: { httpGet: { path: '/healthz', port: 8080 }, periodSeconds: 10, failureThreshold: 3 },
            },
          ],
        },
      },
    },
  };
}

/** ~`bytes` of Deployments, as a `---` separated YAML stream and as concatenated JSON values. */
function inputs(bytes: number): { yamlText: string; jsonText: string; jsonArray: string; docs: number } {
  const rand = rng(3);
  const y: string[] = [];
  const j: string[] = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const d = deployment(i, rand);
    const doc = yaml.dump(d);
    y.push(doc);
    j.push(JSON.stringify(d));
    size += doc.length;
  }
  return { yamlText: y.join('---\n'), jsonText: j.join('\n'), jsonArray: `[${j.join(',')}]`, docs: y.length };
}

/** Median ms of `reps` synchronous runs after one warm-up. */
async function measure(fn: () => unknown, reps: number): Promise<number[]> {
  fn();
  const out: number[] = [];
  for (let i = 0; i < reps; i++) out.push((await timed(async () => fn())).ms);
  return out;
}

export const split: Scenario = {
  name: 'split',
  title: 'manifest splitter (Go-compatible YAML→JSON) vs js-yaml loadAll / JSON.parse of the same 5 MB (2 MB with --quick)',
  async run(opts) {
    const { yamlText, jsonText, jsonArray, docs } = inputs((opts.quick ? 2 : 5) * 1000 * 1000);
    const yamlBuf = Buffer.from(yamlText);
    const jsonBuf = Buffer.from(jsonText);
    const reps = opts.quick ? 1 : 7;
    const checks: Row[] = [];
    for (const c of [
      { label: 'YAML stream', buf: yamlBuf, ours: () => splitManifests(yamlBuf), base: () => yaml.loadAll(yamlText), baseName: 'js-yaml loadAll', target: 2.5 },
      { label: 'JSON values', buf: jsonBuf, ours: () => splitManifests(jsonBuf), base: () => JSON.parse(jsonArray), baseName: 'JSON.parse', target: 1.5 },
    ]) {
      if (splitManifests(c.buf).length !== docs) throw new Error(`splitter returned the wrong number of manifests for ${c.label}`);
      const o: number[] = [];
      const b: number[] = [];
      for (let i = 0; i < 2; i++) {
        b.push(...(await measure(c.base, Math.ceil(reps / 2))));
        o.push(...(await measure(c.ours, Math.ceil(reps / 2))));
      }
      const oursMs = median(o);
      const baseMs = median(b);
      opts.log(`split ${c.label}: ours ${oursMs.toFixed(0)} ms, ${c.baseName} ${baseMs.toFixed(0)} ms`);
      checks.push(
        row({
          scenario: 'split',
          case: `${c.label}, ${docs} Deployments, ${fmt.mib(c.buf.length)}`,
          measured: fmt.ms(oursMs),
          baseline: `${c.baseName} ${fmt.ms(baseMs)}`,
          value: oursMs / baseMs,
          unit: '×',
          target: { op: '<=', value: c.target },
          details: { oursMs: o, baselineMs: b, bytes: c.buf.length, docs, MiB: c.buf.length / MiB },
          note: opts.quick ? 'quick: 2 MB, 2 runs each' : undefined,
        }),
      );
    }
    return checks;
  },
};
