import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { kubectlProblem } from '../unit/infra/kubectl.js';

/**
 * A monorepo rendered by the real tools users run as plugins, for the traced cache's
 * differential test: kustomize overlays (`apps/kN`) over shared bases and components, jsonnet
 * apps (`apps/jN`) importing shared libraries and components, and apps of a cdk8s-like node
 * generator (`apps/nN`, the repository's own `gen/` script) rendering one of two chart-like trees
 * of JSON templates. One plugin runs the tool an app dir asks for ({@link realToolsPlugin}).
 * Every file but the docs holds a marker `rN` that an edit changes.
 */
export type Tool = 'kubectl' | 'jsonnet' | 'node';

export const TOOL_APPS: Record<Tool, string[]> = { kubectl: ['k1', 'k2', 'k3'], jsonnet: ['j1', 'j2', 'j3'], node: ['n1', 'n2', 'n3'] };
const SVCS = [1, 2, 3, 4].map(i => `svc${i}`);
const COMPONENTS = ['monitoring', 'security'];
const CHARTS = ['web', 'worker'];

/** Why a tool cannot run here (the node generator always can), or undefined. */
export function toolProblem(tool: Tool): string | undefined {
  if (tool === 'kubectl') return kubectlProblem();
  if (tool === 'jsonnet') {
    const res = spawnSync('jsonnet', ['--version'], { encoding: 'utf8' });
    return res.error || res.status !== 0 ? `jsonnet is not installed (${res.error?.message ?? res.stderr.trim()}): .ci/run installs Debian's jsonnet` : undefined;
  }
  return undefined;
}

/** The plugin: counts its run in $COUNTER (outside the tree), then execs the app's tool. */
export function realToolsPlugin(): string {
  return `generate:
  command: [sh, -c]
  args:
    - |
      echo "$ARGOCD_APP_NAME" >> "$COUNTER"
      if [ -f kustomization.yaml ]; then exec kubectl kustomize .; fi
      if [ -f main.jsonnet ]; then exec jsonnet -y main.jsonnet; fi
      exec ${process.execPath} ../../gen/main.js`;
}

type Chooser = <T>(xs: readonly T[]) => T;

/** Some of `xs` (at least one), in their order. */
function some<T>(xs: readonly T[], r: () => number): T[] {
  const chosen = xs.filter(() => r() < 0.5);
  return chosen.length > 0 ? chosen : [xs[Math.floor(r() * xs.length)]!];
}

function kustomizeApp(app: string, r: () => number): string {
  const bases = some(SVCS, r).map(s => `- ../../kustomize/bases/${s}\n`);
  const components = COMPONENTS.filter(() => r() < 0.4).map(c => `- ../../kustomize/components/${c}\n`);
  const patch = r() < 0.5 ? 'patches:\n- path: replicas.yaml\n  target:\n    kind: Deployment\n' : '';
  return `apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n# r0\nnamePrefix: ${app}-\nnamespace: team-${app}\nresources:\n${bases.join('')}${components.length ? `components:\n${components.join('')}` : ''}${patch}`;
}

function jsonnetApp(r: () => number): string {
  const imports = some(SVCS, r).map(s => `  import '../../jsonnet/components/${s}.jsonnet',\n`);
  return `// r0\nlocal settings = import 'settings.libsonnet';\nstd.map(function(o) o + { metadata+: { namespace: settings.namespace } }, std.flattenArrays([\n${imports.join('')}]))\n`;
}

function nodeApp(app: string, pick: Chooser): string {
  return `${JSON.stringify({ name: app, chart: `../../charts/${pick(CHARTS)}`, values: { replicas: pick(['2', '3']), rev: 'r0' } })}\n`;
}

const template = (kind: string, name: string) =>
  `${JSON.stringify({ apiVersion: kind === 'Service' ? 'v1' : 'apps/v1', kind, metadata: { name: `{{name}}-${name}`, labels: { template: 'r0' }, annotations: { rev: '{{values.rev}}' } }, spec: kind === 'Service' ? { ports: [{ port: 80 }] } : { replicas: '{{values.replicas}}', template: { spec: { containers: [{ name: 'app', image: '{{values.image}}' }] } } } })}\n`;

/** The generator: app.json names a chart; values.json merged with the app's values fill every template in templates/. */
const GENERATOR: Record<string, string> = {
  'gen/main.js': `// r0
const fs = require('node:fs');
const path = require('node:path');
const { render } = require('./render.js');
const app = JSON.parse(fs.readFileSync('app.json', 'utf8'));
const chart = path.resolve(app.chart);
const values = { ...JSON.parse(fs.readFileSync(path.join(chart, 'values.json'), 'utf8')), ...app.values };
const dir = path.join(chart, 'templates');
const docs = fs.readdirSync(dir).filter(f => f.endsWith('.json')).sort().map(f => render(JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')), { values, name: app.name }));
process.stdout.write(docs.map(d => JSON.stringify(d)).join('\\n') + '\\n');
`,
  'gen/render.js': `// r0
const lookup = (scope, ref) => ref.split('.').reduce((o, k) => (o == null ? undefined : o[k]), scope);
exports.render = function render(node, scope) {
  if (typeof node === 'string') return node.replace(/{{([\\w.]+)}}/g, (_, ref) => { const v = lookup(scope, ref); if (v === undefined) throw new Error('no value for ' + ref); return String(v); });
  if (Array.isArray(node)) return node.map(n => render(n, scope));
  if (node && typeof node === 'object') return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, render(v, scope)]));
  return node;
};
`,
};

/** The first commit's files; `tools` are the ones whose apps are in it. */
export function realToolRepo(tools: readonly Tool[], r: () => number): Record<string, string> {
  const pick: Chooser = xs => xs[Math.floor(r() * xs.length)]!;
  const files: Record<string, string> = { 'README.md': 'real tools\n', 'docs/guide.md': 'guide\n' };
  if (tools.includes('kubectl')) {
    for (const s of SVCS) {
      const b = `kustomize/bases/${s}`;
      files[`${b}/kustomization.yaml`] = `apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n# r0\nresources:\n- deployment.yaml\n- service.yaml\nconfigMapGenerator:\n- name: ${s}-config\n  files:\n  - app.properties\nlabels:\n- pairs:\n    app: ${s}\n  includeSelectors: true\n`;
      files[`${b}/deployment.yaml`] = `apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ${s}\n  annotations:\n    rev: "r0"\nspec:\n  replicas: 1\n  template:\n    spec:\n      containers:\n      - name: app\n        image: registry.example/${s}:1.0.0\n        envFrom:\n        - configMapRef:\n            name: ${s}-config\n`;
      files[`${b}/service.yaml`] = `apiVersion: v1\nkind: Service\nmetadata:\n  name: ${s}\n  annotations:\n    rev: "r0"\nspec:\n  ports:\n  - port: 80\n`;
      files[`${b}/app.properties`] = `rev=r0\nservice=${s}\n`;
    }
    files['kustomize/components/monitoring/kustomization.yaml'] = `apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\ncommonAnnotations:\n  prometheus.io/scrape: "true"\n  monitoring-rev: "r0"\n`;
    files['kustomize/components/security/kustomization.yaml'] = `apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n# r0\npatches:\n- path: security.yaml\n  target:\n    kind: Deployment\n`;
    files['kustomize/components/security/security.yaml'] = `# r0\n- op: add\n  path: /spec/template/spec/securityContext\n  value:\n    runAsNonRoot: true\n`;
    for (const app of TOOL_APPS.kubectl) {
      files[`apps/${app}/kustomization.yaml`] = kustomizeApp(app, r);
      files[`apps/${app}/replicas.yaml`] = `# r0\n- op: replace\n  path: /spec/replicas\n  value: 3\n`;
    }
  }
  if (tools.includes('jsonnet')) {
    files['jsonnet/lib/k.libsonnet'] = `// r0
{
  deployment(name, image, replicas):: { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: name }, spec: { replicas: replicas, template: { spec: { containers: [{ name: 'app', image: image }] } } } },
  service(name):: { apiVersion: 'v1', kind: 'Service', metadata: { name: name }, spec: { ports: [{ port: 80 }] } },
}
`;
    files['jsonnet/lib/params.libsonnet'] = `{ registry: 'registry.example', replicas: 2, rev: 'r0' }\n`;
    for (const s of SVCS) {
      files[`jsonnet/components/${s}.jsonnet`] = `local k = import '../lib/k.libsonnet';\nlocal p = import '../lib/params.libsonnet';\n[\n  k.deployment('${s}', p.registry + '/${s}:1.0.0', p.replicas) + { metadata+: { annotations: { rev: p.rev, own: 'r0' } } },\n  k.service('${s}'),\n]\n`;
    }
    for (const app of TOOL_APPS.jsonnet) {
      files[`apps/${app}/main.jsonnet`] = jsonnetApp(r);
      files[`apps/${app}/settings.libsonnet`] = `{ namespace: 'team-${app}', rev: 'r0' }\n`;
    }
  }
  if (tools.includes('node')) {
    Object.assign(files, GENERATOR);
    for (const c of CHARTS) {
      files[`charts/${c}/values.json`] = `${JSON.stringify({ image: `registry.example/${c}:1.0.0`, replicas: '1', rev: 'r0' })}\n`;
      files[`charts/${c}/templates/deployment.json`] = template('Deployment', c);
    }
    files['charts/web/templates/service.json'] = template('Service', 'web');
    for (const app of TOOL_APPS.node) files[`apps/${app}/app.json`] = nodeApp(app, pick);
  }
  return files;
}

/** What a commit did: its description, the app whose own dir it touched, and the tool whose shared files it touched. */
export interface RealToolsCommit {
  what: string;
  app?: string;
  shared?: Tool;
}

/** The tool that reads shared files at `p` (bases and components, libraries, charts and the generator), if any. */
function sharedOf(p: string): Tool | undefined {
  if (p.startsWith('kustomize/')) return 'kubectl';
  if (p.startsWith('jsonnet/')) return 'jsonnet';
  if (p.startsWith('charts/') || p.startsWith('gen/') || p === 'package.json') return 'node';
  return undefined;
}

/** Files a commit may add that make a tool fail (kustomize refuses two kustomization files; node refuses a bad package.json). */
const BREAKING = /(^|\/)(kustomization\.yml|package\.json)$/;

/**
 * One random commit to `tree` (in place): edits (a marker, or a line appended to a doc), new
 * files (read by a tool or not, among them ones a tool probes for: a second kustomization file,
 * a package.json that changes how node loads the generator), deletes, renames, apps switching
 * the bases, components or chart they use, and repairs (a file of `initial` put back, or a
 * breaking file removed) so that most answers stay manifests rather than errors.
 */
export function mutateRealTools(tree: Record<string, string>, initial: Readonly<Record<string, string>>, tools: readonly Tool[], r: () => number): RealToolsCommit {
  const pick: Chooser = xs => xs[Math.floor(r() * xs.length)]!;
  const paths = Object.keys(tree).sort();
  const dirs = [...new Set(paths.map(p => path.posix.dirname(p)))].sort();
  const appOf = (p: string) => /^apps\/([kjn]\d)\//.exec(p)?.[1];
  const missing = Object.keys(initial).filter(p => !(p in tree));
  const breaking = paths.filter(p => BREAKING.test(p));
  const repairs = [...missing, ...breaking];
  const op = pick(['edit', 'edit', 'edit', 'add', 'add', 'delete', 'rename', 'ref', 'ref', ...(repairs.length > 0 ? ['repair', 'repair'] : [])]);
  switch (op) {
    case 'repair': {
      const p = pick(repairs);
      if (p in tree) delete tree[p];
      else tree[p] = initial[p]!;
      return { what: `repair ${p}`, app: appOf(p), shared: sharedOf(p) };
    }
    case 'edit': {
      // Mostly shared files (bases, libraries, charts, the generator): edits that change what several apps read.
      const shared = paths.filter(x => sharedOf(x) !== undefined);
      const p = pick(r() < 0.6 && shared.length > 0 ? shared : paths);
      const marked = /\br\d+\b/.test(tree[p]!);
      tree[p] = marked ? tree[p]!.replace(/\br\d+\b/, `r${Math.floor(r() * 1000)}`) : `${tree[p]}more ${Math.floor(r() * 1000)}\n`;
      return { what: `edit ${p}`, app: appOf(p), shared: sharedOf(p) };
    }
    case 'add': {
      const added = pick<[string, string]>([
        [path.posix.join(pick(dirs), 'notes.txt'), `notes ${Math.floor(r() * 1000)}\n`],
        [path.posix.join(pick(dirs), 'extra.yaml'), `extra: r${Math.floor(r() * 1000)}\n`],
        [`charts/${pick(CHARTS)}/templates/extra${Math.floor(r() * 3)}.json`, template(pick(['Deployment', 'Service']), `extra${Math.floor(r() * 1000)}`)],
        [`apps/${pick(TOOL_APPS.kubectl)}/kustomization.yml`, 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n'],
        [pick(['package.json', 'gen/package.json']), `${JSON.stringify({ type: pick(['commonjs', 'module']) })}\n`],
        [`jsonnet/components/${pick(SVCS)}.libsonnet`, `{ unused: 'r${Math.floor(r() * 1000)}' }\n`],
      ]);
      tree[added[0]] = added[1];
      return { what: `add ${added[0]}`, app: appOf(added[0]), shared: sharedOf(added[0]) };
    }
    case 'delete': {
      const p = pick(paths);
      delete tree[p];
      return { what: `delete ${p}`, app: appOf(p), shared: sharedOf(p) };
    }
    case 'rename': {
      const from = pick(paths);
      const to = path.posix.join(path.posix.dirname(from), `zz-${path.posix.basename(from)}`);
      tree[to] = tree[from]!;
      delete tree[from];
      return { what: `rename ${from} ${to}`, app: appOf(to), shared: sharedOf(from) };
    }
    default: {
      const tool = pick(tools);
      const app = pick(TOOL_APPS[tool]);
      if (tool === 'kubectl') tree[`apps/${app}/kustomization.yaml`] = kustomizeApp(app, r);
      else if (tool === 'jsonnet') tree[`apps/${app}/main.jsonnet`] = jsonnetApp(r);
      else tree[`apps/${app}/app.json`] = nodeApp(app, pick);
      return { what: `ref apps/${app}`, app };
    }
  }
}

/** The tool an app of this repo is rendered by. */
export function toolOf(app: string): Tool {
  return app.startsWith('k') ? 'kubectl' : app.startsWith('j') ? 'jsonnet' : 'node';
}
