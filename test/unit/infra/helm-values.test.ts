import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Deployment } from 'kubernetes-models/apps/v1';
import { parsePluginConfig, pluginSpecDigest, socketFileName } from '../../../cmp/config/plugin-config.js';
import { yamlToJson } from '../../../cmp/split/yaml-to-json.js';
import { REPO_ROOT } from '../../helpers/paths.js';
import { argoRepoServer, docsOf, KUSTOMIZE, one, type Obj } from './infra-files.js';
import { kubectlSkip, renderKustomize, renderWithComponents, requireKubectl } from './kubectl.js';

/**
 * One truth for the proxy sidecar: the argo-helm values (examples/helm/values.yaml) and the Argo
 * CD Operator snippet (examples/argocd-operator/argocd.yaml) describe the very container that
 * infra/kustomize/components/repo-server-sidecar renders, with every volume it mounts declared.
 */

const EXAMPLES = path.join(REPO_ROOT, 'examples');
const SIDECAR = 'cmp-offload';
const COMPONENT = 'components/repo-server-sidecar';
const PATCH = `${COMPONENT}/repo-server-patch.yaml`;

/** Read as Helm and kubectl read YAML (sigs.k8s.io/yaml, YAML 1.1 typing: `0400` is octal). */
const readGoYaml = (file: string): Obj => JSON.parse(yamlToJson(fs.readFileSync(file, 'utf8')));
const helmValues = () => readGoYaml(path.join(EXAMPLES, 'helm/values.yaml'));
const operatorCR = () => readGoYaml(path.join(EXAMPLES, 'argocd-operator/argocd.yaml'));
/** The component's patch, read the same way (its `defaultMode: 0400` is 256, as kubectl reads it). */
const patchDeployment = (): Obj => readGoYaml(path.join(KUSTOMIZE, PATCH));

/**
 * Volumes the argo-cd chart always declares on the repo-server pod
 * (templates/argocd-repo-server/deployment.yaml; repoServer.volumes come before them, in the
 * same list, so a second volume of one of these names makes the Deployment invalid).
 */
const CHART_VOLUMES = new Set(['plugins', 'var-files', 'tmp', 'ssh-known-hosts', 'tls-certs', 'gpg-keys', 'gpg-keyring', 'argocd-repo-server-tls', 'helm-working-dir']);
/** The same for the Argo CD Operator (it appends spec.repo.volumes to these). */
const OPERATOR_VOLUMES = new Set(['ssh-known-hosts', 'tls-certs', 'gpg-keys', 'gpg-keyring', 'tmp', 'argocd-repo-server-tls', 'argocd-operator-redis-tls', 'var-files', 'plugins']);
/** The ones a CMP sidecar mounts from its pod, as Argo's own install has them. */
const ARGO_SIDECAR_VOLUMES = ['var-files', 'plugins'];

interface Install {
  what: string;
  container: Obj;
  volumes: Obj[];
  builtin: Set<string>;
}
const installs = (): Install[] => [
  {
    what: 'examples/helm/values.yaml',
    container: helmValues().repoServer.extraContainers.find((c: Obj) => c.name === SIDECAR),
    volumes: helmValues().repoServer.volumes,
    builtin: CHART_VOLUMES,
  },
  {
    what: 'examples/argocd-operator/argocd.yaml',
    container: operatorCR().spec.repo.sidecarContainers.find((c: Obj) => c.name === SIDECAR),
    volumes: operatorCR().spec.repo.volumes,
    builtin: OPERATOR_VOLUMES,
  },
];

/** The repo-server Deployment the component renders onto a stand-in of Argo CD's. */
function renderedRepoServer(): Obj {
  const out = renderWithComponents([argoRepoServer()], [COMPONENT]);
  const repo = out.find(o => o.kind === 'Deployment' && o.metadata.name === 'argocd-repo-server');
  assert.ok(repo, 'the component rendered no argocd-repo-server');
  return repo;
}

/** Without kubectl: the patch's container with the tag the component's `images` pins. */
function patchedContainer(): Obj {
  const c = patchDeployment().spec.template.spec.containers.find((x: Obj) => x.name === SIDECAR);
  const images = docsOf(`${COMPONENT}/kustomization.yaml`)[0]!.images as Obj[];
  const pin = images.find(i => i.name === c.image);
  assert.ok(pin, `the component pins no tag for ${c.image}`);
  return { ...c, image: `${pin.newName ?? c.image}:${pin.newTag}` };
}
const componentVolumes = (): Obj[] => patchDeployment().spec.template.spec.volumes;

/** The chart's argocd-cmp-cm data (templates/argocd-configs/argocd-cmp-cm.yaml). */
function chartCmpData(values: Obj): Record<string, string> {
  assert.equal(values.configs?.cmp?.create, true, 'configs.cmp.create must be true: nothing else writes argocd-cmp-cm');
  return Object.fromEntries(
    Object.entries(values.configs.cmp.plugins as Obj).map(([name, spec]) => [
      `${name}.yaml`,
      JSON.stringify({ apiVersion: 'argoproj.io/v1alpha1', kind: 'ConfigManagementPlugin', metadata: { name }, spec }),
    ]),
  );
}

/** The one difference allowed: where the plugin.yaml volume takes the file from. */
function assertSameVolumes(inst: Install, expected: Obj[], pluginVolume: (v: Obj) => void): void {
  const declared = new Map(inst.volumes.map(v => [v.name, v]));
  for (const v of inst.volumes) assert.ok(!inst.builtin.has(v.name), `${inst.what}: volume ${v.name} is already declared by the chart/operator (duplicate volume name)`);
  for (const m of inst.container.volumeMounts as Obj[]) {
    if (ARGO_SIDECAR_VOLUMES.includes(m.name)) {
      assert.ok(inst.builtin.has(m.name), `${inst.what}: ${m.name} is not a volume of the repo-server pod`);
      continue;
    }
    const v = declared.get(m.name);
    assert.ok(v, `${inst.what}: the sidecar mounts ${m.name}, which is not declared in its volumes`);
    const want = expected.find(e => e.name === m.name);
    assert.ok(want, `${inst.what}: the component has no volume ${m.name}`);
    if (want.configMap?.name === 'cmp-offload-plugin') pluginVolume(v);
    else assert.deepEqual(v, want, `${inst.what}: volume ${m.name} differs from the component's`);
  }
  assert.deepEqual([...declared.keys()].sort(), (inst.container.volumeMounts as Obj[]).map(m => m.name).filter(n => !ARGO_SIDECAR_VOLUMES.includes(n)).sort(), `${inst.what}: volumes nothing mounts`);
}

test('the Helm values and the operator snippet hold the component\'s sidecar container (without kubectl: the patch file and its pinned tag)', () => {
  const want = patchedContainer();
  for (const inst of installs()) {
    assert.ok(inst.container, `${inst.what}: no container ${SIDECAR}`);
    assert.deepEqual(inst.container, want, `${inst.what}: the sidecar differs from ${PATCH}`);
  }
});

test('the sidecar is the container the repo-server-sidecar component renders (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const spec = renderedRepoServer().spec.template.spec;
  const rendered = spec.containers.find((c: Obj) => c.name === SIDECAR);
  assert.ok(rendered, 'the component rendered no sidecar');
  for (const inst of installs()) {
    // image, args/command, env, volumeMounts, securityContext named first for a readable failure.
    for (const k of ['image', 'command', 'args', 'env', 'volumeMounts', 'securityContext']) {
      assert.deepEqual(inst.container[k], rendered[k], `${inst.what}: ${k} differs from the rendered component`);
    }
    assert.deepEqual(inst.container, rendered, `${inst.what}: the sidecar differs from the rendered component`);
  }
  // What the component mounts without declaring it comes from Argo's pod: var-files and plugins.
  const own = new Set(componentVolumes().map(v => v.name));
  assert.deepEqual((rendered.volumeMounts as Obj[]).map(m => m.name).filter(n => !own.has(n)).sort(), [...ARGO_SIDECAR_VOLUMES].sort());
  assert.ok(ARGO_SIDECAR_VOLUMES.every(n => spec.volumes.some((v: Obj) => v.name === n)));
});

test('every volume the Helm sidecar mounts is declared: the chart\'s var-files and plugins, the rest in repoServer.volumes as the component has them', () => {
  const values = helmValues();
  const inst = installs()[0]!;
  const data = chartCmpData(values);
  assertSameVolumes(inst, componentVolumes(), v => {
    // The plugin's key of the chart's argocd-cmp-cm, seen under the name the sidecar's subPath reads.
    assert.equal(v.configMap?.name, 'argocd-cmp-cm', 'the plugin.yaml volume must be the chart\'s argocd-cmp-cm (configs.cmp)');
    const mount = inst.container.volumeMounts.find((m: Obj) => m.name === v.name);
    const item = (v.configMap.items as Obj[] | undefined)?.find(i => i.path === mount.subPath);
    assert.ok(item, `argocd-cmp-cm is not mapped to ${mount.subPath}`);
    assert.ok(item.key in data, `argocd-cmp-cm has no key ${item.key} (configs.cmp.plugins: ${Object.keys(data).join(', ')})`);
  });
  // The pod the chart would build validates (a stand-in of the chart's repo-server plus these values).
  const repo = argoRepoServer();
  repo.spec.template.spec.containers.push(...values.repoServer.extraContainers);
  repo.spec.template.spec.volumes.unshift(...values.repoServer.volumes);
  assert.doesNotThrow(() => new Deployment(repo as any).validate());
});

test('configs.cmp.plugins holds the plugin.yaml of the kustomize base: proxy and workers agree on one spec', () => {
  const data = chartCmpData(helmValues());
  const [[key, text]] = Object.entries(data) as [[string, string]];
  const fromChart = parsePluginConfig(text);
  const fromBase = parsePluginConfig(one('base/plugin-configmap.yaml', 'ConfigMap').data['plugin.yaml']);
  assert.equal(key, `${fromChart.metadata.name}.yaml`);
  assert.equal(pluginSpecDigest(fromChart), pluginSpecDigest(fromBase), 'the Helm plugin spec differs from base/plugin-configmap.yaml (the KEDA trigger keys and docs follow the base)');
  assert.equal(socketFileName(fromChart), socketFileName(fromBase));
});

test('the operator snippet mounts the base\'s cmp-offload-plugin ConfigMap and declares every other volume as the component does', () => {
  const inst = installs()[1]!;
  assertSameVolumes(inst, componentVolumes(), v => assert.deepEqual(v, componentVolumes().find(c => c.name === v.name)));
  assert.equal(operatorCR().metadata.name, 'argocd', 'the component\'s Service and NetworkPolicy select argocd-repo-server pods');
});

test('the Helm and operator kustomizations render the base and the proxy\'s metrics objects; Helm workers read the chart\'s argocd-cmp-cm (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const inst = installs()[0]!;
  const sidecarPlugin = inst.volumes.find(v => v.name === inst.container.volumeMounts.find((m: Obj) => m.subPath === 'plugin.yaml').name)!;
  for (const dir of ['helm/cmp-offload', 'argocd-operator/cmp-offload']) {
    const out = renderKustomize(path.join(EXAMPLES, dir));
    const has = (kind: string, name: string) => out.some(o => o.kind === kind && o.metadata.name === name);
    for (const [kind, name] of [['Deployment', 'cmp-offload-worker'], ['ScaledObject', 'cmp-offload-worker'], ['Service', 'cmp-offload-proxy-metrics'], ['NetworkPolicy', 'cmp-offload-proxy-metrics']]) {
      assert.ok(has(kind!, name!), `${dir}: no ${kind} ${name}`);
    }
    assert.ok(!out.some(o => o.metadata.name === 'argocd-repo-server'), `${dir}: renders a repo-server`);
    const worker = out.find(o => o.kind === 'Deployment' && o.metadata.name === 'cmp-offload-worker')!;
    // Every worker-pod container that reads plugin.yaml (worker and runner) reads the sidecar's.
    const pod = worker.spec.template.spec;
    const readers = (pod.containers as Obj[]).flatMap(c => (c.volumeMounts as Obj[]).filter(m => m.mountPath === '/home/argocd/cmp-server/config/plugin.yaml').map(m => ({ c: c.name, m })));
    assert.ok(readers.length >= 2, `${dir}: worker and runner must both mount plugin.yaml`);
    for (const { c, m } of readers) {
      const vol = pod.volumes.find((v: Obj) => v.name === m.name);
      const got = { subPath: m.subPath, configMap: vol?.configMap };
      if (dir.startsWith('helm')) {
        assert.deepEqual(got, { subPath: 'plugin.yaml', configMap: sidecarPlugin.configMap }, `${dir}: container ${c} and the sidecar read different plugin.yaml`);
      } else {
        assert.deepEqual(got, { subPath: 'plugin.yaml', configMap: { name: 'cmp-offload-plugin' } }, `${dir}: container ${c}`);
      }
    }
    assert.equal(has('ConfigMap', 'cmp-offload-plugin'), !dir.startsWith('helm'), `${dir}: with Helm the base's plugin ConfigMap would be a second truth`);
  }
});
