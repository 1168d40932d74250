import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { overheadRows, type Workload } from '../lib/trace-overhead.js';
import type { Scenario } from '../lib/types.js';

/**
 * Overhead of the traced cache's read recorder on the tools users run as plugins, over generated trees of
 * two sizes (one in --quick), plain vs recorded (bench/lib/trace-overhead.ts):
 *   kubectl kustomize: an overlay over N bases (Deployment, Service, ConfigMap each) and 3 components
 *   jsonnet:           main.jsonnet importing N component files, each importing two libsonnet libraries
 *   helm template:     a chart of N templates and values (only where helm is on PATH: it is not in Debian)
 *   node generator:    a cdk8s-like plain node script (a few local modules) rendering the same chart to YAML
 * A tool that is missing is skipped with a log line; the trace-overhead scenario keeps the synthetic worst cases.
 */
type Tool = 'kubectl' | 'jsonnet' | 'helm' | 'node';

function write(root: string, files: Record<string, string>): void {
  for (const [rel, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    fs.writeFileSync(path.join(root, rel), text);
  }
}

const svc = (i: number) => `svc${String(i).padStart(3, '0')}`;
const range = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

/** A kustomize tree: bases/svcNNN, components/{monitoring,security,resources}, overlays/prod over all of them. */
function kustomizeTree(n: number): Record<string, string> {
  const files: Record<string, string> = {};
  for (const i of range(n)) {
    const b = `bases/${svc(i)}`;
    files[`${b}/kustomization.yaml`] = `apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- deployment.yaml\n- service.yaml\nconfigMapGenerator:\n- name: ${svc(i)}-config\n  files:\n  - app.properties\nlabels:\n- pairs:\n    app: ${svc(i)}\n  includeSelectors: true\n`;
    files[`${b}/deployment.yaml`] = `apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ${svc(i)}\nspec:\n  replicas: 1\n  template:\n    spec:\n      containers:\n      - name: app\n        image: registry.example/${svc(i)}:1.0.${i}\n        ports:\n        - containerPort: 8080\n        envFrom:\n        - configMapRef:\n            name: ${svc(i)}-config\n`;
    files[`${b}/service.yaml`] = `apiVersion: v1\nkind: Service\nmetadata:\n  name: ${svc(i)}\nspec:\n  ports:\n  - port: 80\n    targetPort: 8080\n`;
    files[`${b}/app.properties`] = range(20).map(k => `key${k}=value-${i}-${k}`).join('\n') + '\n';
  }
  files['components/monitoring/kustomization.yaml'] = `apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\ncommonAnnotations:\n  prometheus.io/scrape: "true"\n`;
  files['components/security/kustomization.yaml'] = `apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n- path: security.yaml\n  target:\n    kind: Deployment\n`;
  files['components/security/security.yaml'] = `- op: add\n  path: /spec/template/spec/securityContext\n  value:\n    runAsNonRoot: true\n    runAsUser: 1000\n`;
  files['components/resources/kustomization.yaml'] = `apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n- path: resources.yaml\n  target:\n    kind: Deployment\n`;
  files['components/resources/resources.yaml'] = `- op: add\n  path: /spec/template/spec/containers/0/resources\n  value:\n    limits: {cpu: 500m, memory: 256Mi}\n`;
  files['overlays/prod/kustomization.yaml'] = `apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: prod\nnamePrefix: prod-\nresources:\n${range(n).map(i => `- ../../bases/${svc(i)}\n`).join('')}components:\n- ../../components/monitoring\n- ../../components/security\n- ../../components/resources\npatches:\n- path: replicas.yaml\n  target:\n    kind: Deployment\nimages:\n- name: registry.example/${svc(1)}\n  newTag: 2.0.0\n`;
  files['overlays/prod/replicas.yaml'] = `- op: replace\n  path: /spec/replicas\n  value: 3\n`;
  return files;
}

/** A jsonnet tree: lib/k.libsonnet and lib/params.libsonnet, components/svcNNN.jsonnet, main.jsonnet importing them all. */
function jsonnetTree(n: number): Record<string, string> {
  const files: Record<string, string> = {
    'lib/k.libsonnet': `{
  deployment(name, image, replicas):: {
    apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: name, labels: { app: name } },
    spec: { replicas: replicas, selector: { matchLabels: { app: name } },
      template: { metadata: { labels: { app: name } }, spec: { containers: [{ name: 'app', image: image, ports: [{ containerPort: 8080 }] }] } } },
  },
  service(name):: { apiVersion: 'v1', kind: 'Service', metadata: { name: name }, spec: { selector: { app: name }, ports: [{ port: 80, targetPort: 8080 }] } },
  configMap(name, data):: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: name + '-config' }, data: data },
}
`,
    'lib/params.libsonnet': `{ namespace: 'prod', registry: 'registry.example', replicas: 3, settings: { ${range(20).map(k => `key${k}: 'value-${k}'`).join(', ')} } }\n`,
  };
  for (const i of range(n)) {
    files[`components/${svc(i)}.jsonnet`] = `local k = import '../lib/k.libsonnet';\nlocal p = import '../lib/params.libsonnet';\nlocal name = '${svc(i)}';
[
  k.deployment(name, p.registry + '/' + name + ':1.0.${i}', p.replicas) + { metadata+: { namespace: p.namespace } },
  k.service(name) + { metadata+: { namespace: p.namespace } },
  k.configMap(name, p.settings { instance: '${i}' }),
]
`;
  }
  files['main.jsonnet'] = `std.flattenArrays([\n${range(n).map(i => `  import 'components/${svc(i)}.jsonnet',\n`).join('')}])\n`;
  return files;
}

/** A chart-like tree (a real Helm chart): Chart.yaml, values.yaml, values-prod.yaml, templates/svcNNN.yaml. */
function chartTree(n: number): Record<string, string> {
  const files: Record<string, string> = {
    'chart/Chart.yaml': 'apiVersion: v2\nname: bench\nversion: 0.1.0\n',
    'chart/values.yaml': `image:\n  registry: registry.example\n  tag: 1.0.0\nreplicas: 1\nnamespace: default\n`,
    'chart/values-prod.yaml': `replicas: 3\nnamespace: prod\n`,
  };
  for (const i of range(n)) {
    files[`chart/templates/${svc(i)}.yaml`] = `apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}-${svc(i)}\n  namespace: {{ .Values.namespace }}\nspec:\n  replicas: {{ .Values.replicas }}\n  template:\n    spec:\n      containers:\n      - name: app\n        image: {{ .Values.image.registry }}/${svc(i)}:{{ .Values.image.tag }}\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Release.Name }}-${svc(i)}\n  namespace: {{ .Values.namespace }}\nspec:\n  ports:\n  - port: 80\n    targetPort: 8080\n`;
  }
  return files;
}

/**
 * The node generator: a plain node script (CommonJS, node's own modules and two local ones, no packages) that
 * merges the chart's values files (a small YAML subset: nested maps of scalars) and renders every template.
 */
const GENERATOR: Record<string, string> = {
  'gen/values.js': `const fs = require('node:fs');
/** Nested maps of scalars, two-space indents: the subset values files here use. */
exports.parse = text => {
  const root = {};
  const stack = [{ indent: -1, map: root }];
  for (const line of text.split('\\n')) {
    const m = /^( *)([\\w.-]+):\\s*(.*)$/.exec(line);
    if (!m) continue;
    while (stack[stack.length - 1].indent >= m[1].length) stack.pop();
    const map = stack[stack.length - 1].map;
    if (m[3] === '') stack.push({ indent: m[1].length, map: (map[m[2]] = {}) });
    else map[m[2]] = m[3];
  }
  return root;
};
const merge = (a, b) => { for (const [k, v] of Object.entries(b)) a[k] = typeof v === 'object' ? merge(a[k] ?? {}, v) : v; return a; };
exports.load = files => files.reduce((acc, f) => merge(acc, exports.parse(fs.readFileSync(f, 'utf8'))), {});
`,
  'gen/render.js': `const util = require('node:util');
exports.render = (template, scope) => template.replace(/{{\\s*\\.([\\w.]+)\\s*}}/g, (_, ref) => {
  const v = ref.split('.').reduce((o, k) => (o == null ? undefined : o[k]), scope);
  if (v === undefined) throw new Error(util.format('no value for .%s', ref));
  return String(v);
});
`,
  'gen/main.js': `const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');
const { load } = require('./values.js');
const { render } = require('./render.js');
const chart = process.argv[2];
const Values = load([path.join(chart, 'values.yaml'), ...process.argv.slice(3)]);
const scope = { Values, Release: { Name: process.env.ARGOCD_APP_NAME || 'bench' } };
const dir = path.join(chart, 'templates');
const docs = fs.readdirSync(dir).sort().map(f => render(fs.readFileSync(path.join(dir, f), 'utf8'), scope));
const out = docs.join('---\\n');
process.stdout.write(out + '# sha256 ' + crypto.createHash('sha256').update(out).digest('hex') + '\\n');
`,
};

function onPath(tool: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false; // not installed: that is the answer
  }
}

function workloads(sizes: number[], log: (line: string) => void): (root: string) => Workload[] {
  const missing = (['kubectl', 'jsonnet', 'helm'] as const).filter(t => !onPath(t));
  for (const t of missing) log(`  ${t} is not on PATH: its rows are skipped${t === 'helm' ? ' (helm is not packaged in Debian; the node generator renders the same chart)' : ''}`);
  const has = (t: Tool) => !missing.includes(t as (typeof missing)[number]);
  return root => {
    write(root, GENERATOR);
    const list: Workload[] = [];
    for (const n of sizes) {
      const [kz, js, ch] = [kustomizeTree(n), jsonnetTree(n), chartTree(n)];
      const dir = path.join(root, `n${n}`);
      write(dir, { ...kz, ...js, ...ch });
      const chart = path.join(dir, 'chart');
      const reads = (files: Record<string, string>, skip = '') => Object.keys(files).filter(f => f !== skip).map(f => `n${n}/${f}`);
      if (has('kubectl')) list.push({ name: `kubectl kustomize: overlay over ${n} bases + 3 components (${3 * n} objects)`, cwd: path.join(dir, 'overlays/prod'), argv: ['kubectl', 'kustomize', '.'], reads: reads(kz) });
      if (has('jsonnet')) list.push({ name: `jsonnet: main.jsonnet importing ${n} components and 2 libsonnet libraries (${3 * n} objects)`, cwd: dir, argv: ['jsonnet', 'main.jsonnet'], reads: reads(js) });
      if (has('helm')) list.push({ name: `helm template: chart of ${n} templates, values-prod.yaml (${2 * n} objects)`, cwd: dir, argv: ['helm', 'template', 'bench', 'chart', '-f', 'chart/values-prod.yaml'], reads: reads(ch) });
      list.push({
        name: `node generator: cdk8s-like script rendering the chart of ${n} templates (${2 * n} objects)`,
        cwd: dir,
        argv: ['node', path.join(root, 'gen/main.js'), chart, path.join(chart, 'values-prod.yaml')],
        reads: [...reads(ch, 'chart/Chart.yaml'), ...Object.keys(GENERATOR)],
      });
    }
    return list;
  };
}

export const traceOverheadReal: Scenario = {
  name: 'trace-overhead-real',
  title: 'traced cache recorder (cmp-trace, records parsed; CMP_OFFLOAD_TRACE_CPUS=one and all) vs the same command run plainly, interleaved: real tools on generated trees',
  run: opts => overheadRows(opts, 'trace-overhead-real', workloads(opts.quick ? [10] : [10, 60], opts.log), opts.quick ? 3 : 9, opts.quick ? 'quick: one size' : undefined),
};
