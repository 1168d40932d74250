import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Deployment } from 'kubernetes-models/apps/v1';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { ConfigMap } from 'kubernetes-models/v1';
import { compileOptions } from '../../../cmp/config/options.js';
import { REPO_ROOT } from '../../helpers/paths.js';
import { argoRepoServer, docsOf, documentedPatches, KUSTOMIZE, kustomizationFiles, one, type Obj } from './infra-files.js';
import { kubectlSkip, renderKustomize, requireKubectl } from './kubectl.js';

/**
 * The optional otlp component (infra/kustomize/components/otlp): the OTLP settings in one
 * ConfigMap that the proxy sidecar and the worker container (not the runner) read with envFrom,
 * and the workers' egress to the collector's namespace and port, which follow the address.
 */

const COMPONENT = 'components/otlp';
const CONFIGMAP = 'cmp-offload-otlp';
const ENV_FROM = [{ configMapRef: { name: CONFIGMAP } }];

/** The component's ConfigMap generator: its options and the settings its literals hold. */
function generator(): { options: Obj; data: Record<string, string> } {
  const g = (docsOf(`${COMPONENT}/kustomization.yaml`)[0]!.configMapGenerator as Obj[]).find(x => x.name === CONFIGMAP)!;
  assert.ok(g, `the component generates no ${CONFIGMAP}`);
  const data = Object.fromEntries((g.literals as string[]).map(l => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  return { options: g.options ?? {}, data };
}

/** Throws unless the policy lets worker pods reach the namespace and port of `address` (`<service>.<namespace>[.svc…]:<port>`) and nothing else. */
function assertEgressTo(np: Obj, address: string): void {
  const [host, port] = address.split(':') as [string, string];
  const namespace = host.split('.')[1];
  assert.ok(namespace, `${address} names no namespace (<service>.<namespace>:<port>)`);
  const worker = one('base/worker-deployment.yaml', 'Deployment');
  assert.deepEqual(np.spec.podSelector.matchLabels, worker.spec.selector.matchLabels);
  assert.deepEqual(np.spec.policyTypes, ['Egress'], 'it must not take part in ingress');
  assert.equal(np.spec.ingress, undefined);
  assert.deepEqual(np.spec.egress, [{ to: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': namespace } } }], ports: [{ port: Number(port), protocol: 'TCP' }] }]);
}

const containerOf = (deployment: Obj, name: string): Obj => deployment.spec.template.spec.containers.find((c: Obj) => c.name === name);

test('the otlp component: one ConfigMap of OTLP settings the code reads, envFrom on the sidecar and the worker container only, egress to the collector', () => {
  const files = kustomizationFiles(path.join(KUSTOMIZE, COMPONENT));
  assert.deepEqual(files.resources, ['worker-egress-otlp-networkpolicy.yaml']);
  assert.deepEqual(files.patches.sort(), ['repo-server-patch.yaml', 'worker-patch.yaml']);
  const { options, data } = generator();
  for (const k of Object.keys(data)) assert.match(k, /^ARGOCD_CMP_SERVER_OTLP_/);
  assert.equal(compileOptions({ ARGOCD_PLUGINSOCKFILEPATH: '/tmp', ...data }).otlp?.endpoint, data.ARGOCD_CMP_SERVER_OTLP_ADDRESS);
  // The Helm and Operator sidecars, which kustomize does not patch, find it by this name.
  assert.equal(options.disableNameSuffixHash, true);
  // Each patch only adds the envFrom, to the one container that exports (the runner exports nothing).
  const patch = (file: string) => one(`${COMPONENT}/${file}`, 'Deployment').spec.template.spec.containers;
  assert.deepEqual(patch('repo-server-patch.yaml'), [{ name: 'cmp-offload', envFrom: ENV_FROM }]);
  assert.deepEqual(patch('worker-patch.yaml'), [{ name: 'worker', envFrom: ENV_FROM }]);
  const np = one(`${COMPONENT}/worker-egress-otlp-networkpolicy.yaml`, 'NetworkPolicy');
  assert.doesNotThrow(() => new NetworkPolicy(np as any).validate());
  assertEgressTo(np, data.ARGOCD_CMP_SERVER_OTLP_ADDRESS!);
  assert.notEqual(np.metadata.name, one('base/worker-networkpolicy.yaml', 'NetworkPolicy').metadata.name, 'it must add a policy, not replace the base one');
  assert.throws(() => assertEgressTo(np, 'otel-collector.observability:4317'), 'the check compares the namespace');
  assert.throws(() => assertEgressTo(np, 'otel-collector.monitoring:4318'), 'the check compares the port');
});

test('the Helm values and the Operator snippet show the sidecar\'s envFrom of the same ConfigMap, commented out', () => {
  for (const file of ['examples/helm/values.yaml', 'examples/argocd-operator/argocd.yaml']) {
    const text = fs.readFileSync(path.join(REPO_ROOT, file), 'utf8');
    assert.match(text, new RegExp(`^ *# envFrom:\\n *#   - configMapRef: \\{name: ${CONFIGMAP}\\}$`, 'm'), file);
  }
  for (const dir of ['examples/helm/cmp-offload', 'examples/argocd-operator/cmp-offload']) {
    assert.match(fs.readFileSync(path.join(REPO_ROOT, dir, 'kustomization.yaml'), 'utf8'), /^ *# - \.\.\/\.\.\/\.\.\/infra\/kustomize\/components\/otlp$/m, dir);
  }
});

/** Render `resources` (relative to infra/kustomize, or objects) with components and patches. */
function render(resources: (string | Obj)[], components: string[], patches: Obj[] = []): Obj[] {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-otlp-'));
  try {
    const rel = (p: string) => path.relative(tmp, path.join(KUSTOMIZE, p));
    const res = resources.map((r, i) => {
      if (typeof r === 'string') return rel(r);
      fs.writeFileSync(path.join(tmp, `resource-${i}.yaml`), JSON.stringify(r));
      return `resource-${i}.yaml`;
    });
    fs.writeFileSync(path.join(tmp, 'kustomization.yaml'), JSON.stringify({ resources: res, components: components.map(rel), patches }));
    return renderKustomize(tmp);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

test('kubectl kustomize renders the otlp component onto the sidecar and the workers, and the address change of section 3.6 (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const find = (out: Obj[], kind: string, name: string) => {
    const o = out.find(x => x.kind === kind && x.metadata.name === name);
    assert.ok(o, `no ${kind} ${name}`);
    return o;
  };
  const components = ['components/repo-server-sidecar', COMPONENT];
  const out = render([argoRepoServer(), 'base'], components);
  const repo = find(out, 'Deployment', 'argocd-repo-server');
  const worker = find(out, 'Deployment', 'cmp-offload-worker');
  for (const d of [repo, worker]) assert.doesNotThrow(() => new Deployment(d as any).validate(), d.metadata.name);
  assert.deepEqual(containerOf(repo, 'cmp-offload').envFrom, ENV_FROM);
  assert.deepEqual(containerOf(worker, 'worker').envFrom, ENV_FROM);
  assert.equal(containerOf(worker, 'runner').envFrom, undefined, 'the runner holds no settings of ours');
  assert.equal(containerOf(repo, 'argocd-repo-server').envFrom, undefined);
  const cm = find(out, 'ConfigMap', CONFIGMAP);
  assert.doesNotThrow(() => new ConfigMap(cm as any).validate());
  assert.deepEqual(cm.data, generator().data);
  // What the sidecar starts with: its env and the ConfigMap's.
  const env = Object.fromEntries((containerOf(repo, 'cmp-offload').env as Obj[]).filter(e => 'value' in e).map(e => [e.name, e.value]));
  assert.equal(compileOptions({ ...env, ...cm.data }, { role: 'proxy' }).otlp?.endpoint, 'otel-collector.monitoring:4317');
  assertEgressTo(find(out, 'NetworkPolicy', 'cmp-offload-worker-egress-otlp'), cm.data.ARGOCD_CMP_SERVER_OTLP_ADDRESS!);

  // The documented patches: another collector, and the policy's namespace with it.
  const patches = documentedPatches('### 3.6 Tracing');
  assert.equal(patches.length, 1, 'expected the one example of section 3.6');
  const moved = render([argoRepoServer(), 'base'], components, patches[0]);
  const data = find(moved, 'ConfigMap', CONFIGMAP).data;
  assert.equal(data.ARGOCD_CMP_SERVER_OTLP_ADDRESS, 'otel-collector.observability:4317');
  assert.equal(compileOptions({ ARGOCD_PLUGINSOCKFILEPATH: '/tmp', ...data }).otlp?.attrs['k8s.cluster.name'], 'prod');
  assertEgressTo(find(moved, 'NetworkPolicy', 'cmp-offload-worker-egress-otlp'), data.ARGOCD_CMP_SERVER_OTLP_ADDRESS);

  // Uncommented in the Helm example: the workers get it; no repo-server there, the sidecar patch does nothing.
  const helm = render([path.relative(KUSTOMIZE, path.join(REPO_ROOT, 'examples/helm/cmp-offload'))], [COMPONENT]);
  assert.deepEqual(containerOf(find(helm, 'Deployment', 'cmp-offload-worker'), 'worker').envFrom, ENV_FROM);
  find(helm, 'ConfigMap', CONFIGMAP);
  assert.ok(!helm.some(o => o.metadata.name === 'argocd-repo-server'));
});
