import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Deployment } from 'kubernetes-models/apps/v1';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { Role, RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { ServiceAccount } from 'kubernetes-models/v1';
import { compileOptions, DEFAULT_HTTP_ADDR } from '../../../cmp/config/options.js';
import { kubectlSkip, renderKustomize, requireKubectl } from './kubectl.js';
import { docsOf, KUSTOMIZE, kustomizationFiles, one, type Obj } from './infra-files.js';

/** components/keeper: the keeper's Deployment, its narrow RBAC and its network policies. */
const DIR = 'components/keeper';
const deployment = () => one(`${DIR}/keeper-deployment.yaml`, 'Deployment');
const container = () => deployment().spec.template.spec.containers[0] as Obj;
const worker = () => one('base/worker-deployment.yaml', 'Deployment').spec.template.spec.containers[0] as Obj;
const rbac = (kind: string) => one(`${DIR}/keeper-rbac.yaml`, kind);
const envOf = (c: Obj): Record<string, string> => Object.fromEntries((c.env ?? []).filter((e: Obj) => 'value' in e).map((e: Obj) => [e.name, e.value]));

test('the keeper component validates and lists its files', () => {
  const k = kustomizationFiles(path.join(KUSTOMIZE, DIR));
  assert.deepEqual(k.resources.sort(), ['keeper-deployment.yaml', 'keeper-networkpolicy.yaml', 'keeper-rbac.yaml']);
  new Deployment(deployment()).validate();
  new ServiceAccount(rbac('ServiceAccount')).validate();
  new Role(rbac('Role')).validate();
  new RoleBinding(rbac('RoleBinding') as ConstructorParameters<typeof RoleBinding>[0]).validate();
});

test('RBAC: its own ServiceAccount, a Role allowing only get and patch on applications.argoproj.io, bound to it alone', () => {
  const sa = rbac('ServiceAccount').metadata.name;
  assert.deepEqual(rbac('Role').rules, [{ apiGroups: ['argoproj.io'], resources: ['applications'], verbs: ['get', 'patch'] }]);
  const binding = rbac('RoleBinding');
  assert.deepEqual(binding.roleRef, { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: rbac('Role').metadata.name });
  // Argo CD's namespace in the examples and overlays/argocd: a ServiceAccount subject must name it.
  assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: sa, namespace: 'argocd' }]);
  assert.equal(one('overlays/argocd/kustomization.yaml', 'Kustomization').namespace, 'argocd');
  const spec = deployment().spec.template.spec;
  assert.equal(spec.serviceAccountName, sa);
  assert.notEqual(spec.automountServiceAccountToken, false, 'the keeper needs its token');
  // The worker pods keep theirs off: only the keeper talks to the API.
  assert.equal(one('base/worker-deployment.yaml', 'Deployment').spec.template.spec.automountServiceAccountToken, false);
});

test('the keeper runs `cmp-offload keeper` on the proxy\'s image (pinned like the sidecar\'s), with the workers\' Redis Secret and signing key, restricted PSS', () => {
  const c = container();
  const spec = deployment().spec.template.spec;
  assert.deepEqual(c.args, ['keeper']);
  assert.equal(c.image, 'ghcr.io/cmp-offload/cmp-offload-proxy');
  const pins = (dir: string) => docsOf(`${dir}/kustomization.yaml`)[0]!.images;
  assert.deepEqual(pins(DIR), pins('components/repo-server-sidecar'));
  const secretRef = (x: Obj, name: string) => x.env.find((e: Obj) => e.name === name)?.valueFrom;
  assert.deepEqual(secretRef(c, 'CMP_OFFLOAD_REDIS_URL'), secretRef(worker(), 'CMP_OFFLOAD_REDIS_URL'));
  assert.equal(envOf(c).CMP_OFFLOAD_SIGNING_KEY_FILE, envOf(worker()).CMP_OFFLOAD_SIGNING_KEY_FILE);
  const keyVolume = (d: Obj) => d.spec.template.spec.volumes.find((v: Obj) => v.secret)?.secret.secretName;
  assert.equal(keyVolume(deployment()), keyVolume(one('base/worker-deployment.yaml', 'Deployment')));
  assert.deepEqual(c.env.find((e: Obj) => e.name === 'CMP_OFFLOAD_KEEPER_ARGOCD_NAMESPACE').valueFrom, { fieldRef: { fieldPath: 'metadata.namespace' } });
  // Restricted Pod Security Standard.
  assert.equal(spec.securityContext.runAsNonRoot, true);
  assert.equal(spec.securityContext.seccompProfile.type, 'RuntimeDefault');
  assert.equal(c.securityContext.allowPrivilegeEscalation, false);
  assert.equal(c.securityContext.readOnlyRootFilesystem, true);
  assert.deepEqual(c.securityContext.capabilities.drop, ['ALL']);
  assert.ok(c.resources.requests.cpu && c.resources.requests.memory && c.resources.limits.memory);
  // Every value is accepted, the HTTP port is the probes' and the documented default.
  const o = compileOptions({ ...envOf(c), CMP_OFFLOAD_REDIS_URL: 'redis://r:6379', CMP_OFFLOAD_SIGNING_KEY_FILE: '', KUBERNETES_SERVICE_HOST: '10.0.0.1' }, { role: 'keeper' });
  assert.equal(o.keeper.dryRun, false);
  assert.equal(`:${o.http!.port}`, DEFAULT_HTTP_ADDR.keeper);
  assert.equal(c.ports[0].containerPort, o.http!.port);
  assert.equal(c.readinessProbe.httpGet.path, '/readyz');
  assert.equal(c.livenessProbe.httpGet.path, '/healthz');
  assert.equal(deployment().spec.template.metadata.annotations['prometheus.io/port'], String(o.http!.port));
});

test('network: the bundled Redis admits the keeper; the keeper admits scrapes from monitoring only', () => {
  const policies = docsOf(`${DIR}/keeper-networkpolicy.yaml`);
  assert.equal(policies.length, 2);
  for (const np of policies) new NetworkPolicy(np).validate();
  const byName = new Map(policies.map(o => [o.metadata.name as string, o]));
  const redisFromKeeper = byName.get('cmp-offload-redis-from-keeper')!;
  assert.deepEqual(redisFromKeeper.spec.podSelector.matchLabels, one('base/redis-deployment.yaml', 'Deployment').spec.selector.matchLabels);
  assert.deepEqual(redisFromKeeper.spec.ingress[0].from, [{ podSelector: { matchLabels: deployment().spec.selector.matchLabels } }]);
  assert.deepEqual(redisFromKeeper.spec.ingress[0].ports, one('base/redis-networkpolicy.yaml', 'NetworkPolicy').spec.ingress[0].ports);
  const own = byName.get('cmp-offload-keeper')!;
  assert.deepEqual(own.spec.podSelector.matchLabels, deployment().spec.selector.matchLabels);
  assert.deepEqual(own.spec.ingress, [{ from: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } }], ports: [{ port: 9103, protocol: 'TCP' }] }]);
});

test('the component renders with the base in Argo CD\'s namespace: Role, binding and Deployment there (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-keeper-kustomize-'));
  try {
    const rel = (p: string) => path.relative(tmp, path.join(KUSTOMIZE, p));
    fs.writeFileSync(path.join(tmp, 'kustomization.yaml'), JSON.stringify({ namespace: 'argocd', resources: [rel('base')], components: [rel(DIR)] }));
    const objs = renderKustomize(tmp);
    const get = (kind: string, name: string) => objs.find(o => o.kind === kind && o.metadata.name === name);
    for (const [kind, name] of [
      ['ServiceAccount', 'cmp-offload-keeper'],
      ['Role', 'cmp-offload-keeper'],
      ['RoleBinding', 'cmp-offload-keeper'],
      ['Deployment', 'cmp-offload-keeper'],
      ['NetworkPolicy', 'cmp-offload-redis-from-keeper'],
    ]) {
      const o = get(kind!, name!);
      assert.ok(o, `${kind} ${name} not rendered`);
      assert.equal(o.metadata.namespace, 'argocd', `${kind} ${name}`);
    }
    assert.deepEqual(get('RoleBinding', 'cmp-offload-keeper')!.subjects, [{ kind: 'ServiceAccount', name: 'cmp-offload-keeper', namespace: 'argocd' }]);
    const c = get('Deployment', 'cmp-offload-keeper')!.spec.template.spec.containers[0];
    assert.equal(c.image, 'ghcr.io/cmp-offload/cmp-offload-proxy:0.1.0', 'the pinned proxy image');
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
