import fs from 'node:fs';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Deployment } from 'kubernetes-models/apps/v1';
import { parsePluginConfig, pluginSpecDigest, socketFileName } from '../../../cmp/config/plugin-config.js';
import { yamlToJson } from '../../../cmp/go/yaml-to-json.js';
import { REPO_ROOT } from '../../helpers/paths.js';
import { argoRepoServer, basePluginYaml, docsOf, KUSTOMIZE, strategicMerge, type Obj } from './infra-files.js';
import { kubectlSkip, renderKustomize, renderWithComponents, requireKubectl } from './kubectl.js';
import { assertGitCredsPod, REPO_SERVER } from './git-creds-pod.js';

/**
 * One truth for the proxy sidecar: the argo-helm values (examples/helm/values.yaml) and the Argo
 * CD Operator snippet (examples/argocd-operator/argocd.yaml) describe the very container that
 * infra/kustomize/components/repo-server-sidecar renders, with every volume it mounts declared.
 * Their provideGitCreds variants (values-git-creds.yaml, argocd-git-creds.yaml) hold the container,
 * volumes and repo-server entries that the sidecar component renders with components/git-creds.
 */

const EXAMPLES = path.join(REPO_ROOT, 'examples');
const SIDECAR = 'cmp-offload';
const COMPONENT = 'components/repo-server-sidecar';
const GIT_CREDS = 'components/git-creds';

/** Read as Helm and kubectl read YAML (sigs.k8s.io/yaml, YAML 1.1 typing: `0400` is octal). */
const readGoYaml = (file: string): Obj => JSON.parse(yamlToJson(fs.readFileSync(file, 'utf8')));
const helmValues = (file = 'values.yaml') => readGoYaml(path.join(EXAMPLES, 'helm', file));
const operatorCR = (file = 'argocd.yaml') => readGoYaml(path.join(EXAMPLES, 'argocd-operator', file));
/** A component's patch, read the same way (its `defaultMode: 0400` is 256, as kubectl reads it). */
const patchDeployment = (component = COMPONENT): Obj => readGoYaml(path.join(KUSTOMIZE, component, 'repo-server-patch.yaml'));

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
/** With git-creds the sidecar also mounts the pod's SSH known hosts and TLS certificates. */
const GIT_CREDS_POD_VOLUMES = [...ARGO_SIDECAR_VOLUMES, 'ssh-known-hosts', 'tls-certs'];

interface Install {
  what: string;
  container: Obj;
  volumes: Obj[];
  builtin: Set<string>;
  /** The components whose render it must equal: the sidecar's, and git-creds for the variants. */
  components: string[];
  /** Volumes of the repo-server pod the sidecar mounts without declaring them. */
  fromPod: string[];
  /** What the variants add to the repo-server container itself (repoServer.env / spec.repo.env, volumeMounts). */
  repoServer?: { env: Obj[]; volumeMounts: Obj[] };
}
const helmInstall = (file: string, components: string[]): Install => {
  const v = helmValues(file).repoServer;
  return {
    what: `examples/helm/${file}`,
    container: v.extraContainers.find((c: Obj) => c.name === SIDECAR),
    volumes: v.volumes,
    builtin: CHART_VOLUMES,
    components,
    fromPod: components.includes(GIT_CREDS) ? GIT_CREDS_POD_VOLUMES : ARGO_SIDECAR_VOLUMES,
    ...(v.env || v.volumeMounts ? { repoServer: { env: v.env, volumeMounts: v.volumeMounts } } : {}),
  };
};
const operatorInstall = (file: string, components: string[]): Install => {
  const r = operatorCR(file).spec.repo;
  return {
    what: `examples/argocd-operator/${file}`,
    container: r.sidecarContainers.find((c: Obj) => c.name === SIDECAR),
    volumes: r.volumes,
    builtin: OPERATOR_VOLUMES,
    components,
    fromPod: components.includes(GIT_CREDS) ? GIT_CREDS_POD_VOLUMES : ARGO_SIDECAR_VOLUMES,
    ...(r.env || r.volumeMounts ? { repoServer: { env: r.env, volumeMounts: r.volumeMounts } } : {}),
  };
};
const WITH_GIT_CREDS = [COMPONENT, GIT_CREDS];
const installs = (): Install[] => [
  helmInstall('values.yaml', [COMPONENT]),
  operatorInstall('argocd.yaml', [COMPONENT]),
  helmInstall('values-git-creds.yaml', WITH_GIT_CREDS),
  operatorInstall('argocd-git-creds.yaml', WITH_GIT_CREDS),
];
const helmInstalls = () => installs().filter(i => i.what.startsWith('examples/helm/'));
const operatorInstalls = () => installs().filter(i => i.what.startsWith('examples/argocd-operator/'));

/** The repo-server Deployment the components render onto a stand-in of Argo CD's (one render per list). */
const renders = new Map<string, Obj>();
function renderedRepoServer(components: string[] = [COMPONENT]): Obj {
  const key = components.join(',');
  if (!renders.has(key)) {
    const out = renderWithComponents([argoRepoServer()], components);
    const repo = out.find(o => o.kind === 'Deployment' && o.metadata.name === 'argocd-repo-server');
    assert.ok(repo, `${key} rendered no argocd-repo-server`);
    renders.set(key, repo);
  }
  return structuredClone(renders.get(key)!);
}

/** Without kubectl: the patches' container (merged as kubectl does) with the tag the sidecar component's `images` pins. */
function patchedContainer(components: string[] = [COMPONENT]): Obj {
  const [first, ...rest] = components.map(k => patchDeployment(k).spec.template.spec.containers.find((x: Obj) => x.name === SIDECAR));
  const c = rest.reduce((acc, p) => strategicMerge(acc, p), first);
  const images = docsOf(`${COMPONENT}/kustomization.yaml`)[0]!.images as Obj[];
  const pin = images.find(i => i.name === c.image);
  assert.ok(pin, `the component pins no tag for ${c.image}`);
  return { ...c, image: `${pin.newName ?? c.image}:${pin.newTag}` };
}
const componentVolumes = (components: string[] = [COMPONENT]): Obj[] => components.flatMap(k => patchDeployment(k).spec.template.spec.volumes);
/** What git-creds adds to the repo-server container. */
const gitCredsRepoServer = (): Obj => patchDeployment(GIT_CREDS).spec.template.spec.containers.find((c: Obj) => c.name === REPO_SERVER);

/**
 * Kustomize puts a patch's new list entries first; the variants keep values.yaml's order and add
 * git-creds' entries at the end. Order within env and volumeMounts means nothing here (no
 * `$(VAR)` references, distinct mount paths), so the variants are compared without it.
 */
const unordered = (c: Obj): Obj => ({
  ...c,
  ...(c.env ? { env: [...c.env].sort((a: Obj, b: Obj) => a.name.localeCompare(b.name)) } : {}),
  ...(c.volumeMounts ? { volumeMounts: [...c.volumeMounts].sort((a: Obj, b: Obj) => a.mountPath.localeCompare(b.mountPath)) } : {}),
});
const comparable = (inst: Install, c: Obj): Obj => (inst.components.length > 1 ? unordered(c) : c);

/** The pod the chart or the operator would build: the stand-in repo-server plus the install's entries. */
function installedPod(inst: Install): Obj {
  const repo = argoRepoServer();
  const spec = repo.spec.template.spec;
  spec.containers.push(inst.container);
  spec.volumes.unshift(...inst.volumes);
  const main = spec.containers.find((c: Obj) => c.name === REPO_SERVER);
  main.env = [...(main.env ?? []), ...(inst.repoServer?.env ?? [])];
  main.volumeMounts = [...main.volumeMounts, ...(inst.repoServer?.volumeMounts ?? [])];
  return repo;
}

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
    if (inst.fromPod.includes(m.name)) {
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
  // Every volume the install declares is mounted by the sidecar or, for git-creds, the repo-server too.
  const mounted = [...(inst.container.volumeMounts as Obj[]), ...(inst.repoServer?.volumeMounts ?? [])].map(m => m.name).filter(n => !inst.fromPod.includes(n));
  assert.deepEqual([...declared.keys()].sort(), [...new Set(mounted)].sort(), `${inst.what}: volumes nothing mounts`);
  for (const m of inst.repoServer?.volumeMounts ?? []) {
    const want = expected.find(e => e.name === m.name);
    assert.ok(want && declared.has(m.name), `${inst.what}: the repo-server mounts ${m.name}, which is not declared`);
    assert.deepEqual(declared.get(m.name), want, `${inst.what}: volume ${m.name} differs from the component's`);
  }
}

test('the Helm values and the operator snippet hold the component\'s sidecar container (without kubectl: the patch file and its pinned tag)', () => {
  for (const inst of installs()) {
    assert.ok(inst.container, `${inst.what}: no container ${SIDECAR}`);
    assert.deepEqual(comparable(inst, inst.container), comparable(inst, patchedContainer(inst.components)), `${inst.what}: the sidecar differs from the patches of ${inst.components.join(' + ')}`);
  }
});

test('the git-creds variants give the repo-server container git-creds\' env and mounts, and the pod they build passes the git-creds checks', () => {
  const want = gitCredsRepoServer();
  for (const inst of installs()) {
    const pod = installedPod(inst);
    assert.doesNotThrow(() => new Deployment(pod as any).validate(), inst.what);
    if (!inst.components.includes(GIT_CREDS)) {
      assert.equal(inst.repoServer, undefined, `${inst.what}: sets the repo-server's env or mounts`);
      assert.throws(() => assertGitCredsPod(pod, inst.what), 'without git-creds the checks fail');
      continue;
    }
    assert.deepEqual(inst.repoServer, { env: want.env, volumeMounts: want.volumeMounts }, `${inst.what}: the repo-server's entries differ from ${GIT_CREDS}`);
    assertGitCredsPod(pod, inst.what);
  }
});

test('the sidecar is the container the repo-server-sidecar component renders, with git-creds for the variants (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  for (const inst of installs()) {
    const spec = renderedRepoServer(inst.components).spec.template.spec;
    const rendered = spec.containers.find((c: Obj) => c.name === SIDECAR);
    assert.ok(rendered, `${inst.components.join(' + ')} rendered no sidecar`);
    const [got, want] = [comparable(inst, inst.container), comparable(inst, rendered)];
    // image, args/command, env, volumeMounts, securityContext named first for a readable failure.
    for (const k of ['image', 'command', 'args', 'env', 'volumeMounts', 'securityContext']) {
      assert.deepEqual(got[k], want[k], `${inst.what}: ${k} differs from the rendered ${inst.components.join(' + ')}`);
    }
    assert.deepEqual(got, want, `${inst.what}: the sidecar differs from the rendered ${inst.components.join(' + ')}`);
    // What the components mount without declaring it comes from Argo's pod.
    const own = new Set(componentVolumes(inst.components).map(v => v.name));
    assert.deepEqual((rendered.volumeMounts as Obj[]).map(m => m.name).filter(n => !own.has(n)).sort(), [...inst.fromPod].sort(), inst.what);
    assert.ok(inst.fromPod.every(n => spec.volumes.some((v: Obj) => v.name === n)));
    if (inst.repoServer) {
      const main = unordered(spec.containers.find((c: Obj) => c.name === REPO_SERVER));
      const stub = unordered(argoRepoServer().spec.template.spec.containers[0]);
      const added = (k: 'env' | 'volumeMounts') => (main[k] as Obj[]).filter(x => !(stub[k] as Obj[]).some(y => isDeepStrictEqual(y, x)));
      assert.deepEqual(unordered(inst.repoServer), { env: added('env'), volumeMounts: added('volumeMounts') }, `${inst.what}: the repo-server's entries differ from the render`);
    }
  }
});

test('every volume the Helm sidecar mounts is declared: the chart\'s var-files and plugins (and for git-creds ssh-known-hosts and tls-certs), the rest in repoServer.volumes as the components have them', () => {
  const data = chartCmpData(helmValues());
  for (const inst of helmInstalls()) {
  assertSameVolumes(inst, componentVolumes(inst.components), v => {
    // The plugin's key of the chart's argocd-cmp-cm, seen under the name the sidecar's subPath reads.
    assert.equal(v.configMap?.name, 'argocd-cmp-cm', 'the plugin.yaml volume must be the chart\'s argocd-cmp-cm (configs.cmp)');
    const mount = inst.container.volumeMounts.find((m: Obj) => m.name === v.name);
    const item = (v.configMap.items as Obj[] | undefined)?.find(i => i.path === mount.subPath);
    assert.ok(item, `argocd-cmp-cm is not mapped to ${mount.subPath}`);
    assert.ok(item.key in data, `argocd-cmp-cm has no key ${item.key} (configs.cmp.plugins: ${Object.keys(data).join(', ')})`);
  });
  // The pod the chart would build validates (a stand-in of the chart's repo-server plus these values).
  assert.doesNotThrow(() => new Deployment(installedPod(inst) as any).validate(), inst.what);
  }
  // The git-creds values go on top of values.yaml (a second -f): everything else comes from there.
  assert.deepEqual(Object.keys(helmValues('values-git-creds.yaml')), ['repoServer']);
  assert.deepEqual(Object.keys(helmValues('values-git-creds.yaml').repoServer).sort(), ['env', 'extraContainers', 'volumeMounts', 'volumes']);
});

test('configs.cmp.plugins holds the plugin.yaml of the kustomize base: proxy and workers agree on one spec', () => {
  const data = chartCmpData(helmValues());
  const [[key, text]] = Object.entries(data) as [[string, string]];
  const fromChart = parsePluginConfig(text);
  const fromBase = parsePluginConfig(basePluginYaml());
  assert.equal(key, `${fromChart.metadata.name}.yaml`);
  assert.equal(pluginSpecDigest(fromChart), pluginSpecDigest(fromBase), 'the Helm plugin spec differs from base/plugin.yaml (the KEDA trigger keys and docs follow the base)');
  assert.equal(socketFileName(fromChart), socketFileName(fromBase));
});

test('the operator snippet mounts the base\'s cmp-offload-plugin ConfigMap and declares every other volume as the component does', () => {
  for (const inst of operatorInstalls()) {
    const expected = componentVolumes(inst.components);
    assertSameVolumes(inst, expected, v => assert.deepEqual(v, expected.find(c => c.name === v.name)));
  }
  for (const f of ['argocd.yaml', 'argocd-git-creds.yaml']) assert.equal(operatorCR(f).metadata.name, 'argocd', `${f}: the component's Service and NetworkPolicy select argocd-repo-server pods`);
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
        assert.match(got.configMap?.name ?? '', /^cmp-offload-plugin-[a-z0-9]{10}$/, `${dir}: container ${c} reads no generated plugin ConfigMap`);
        assert.equal(got.subPath, 'plugin.yaml');
      }
    }
    if (dir.startsWith('helm')) {
      // The chart's ConfigMap keeps its name: Reloader's annotation is what rolls the workers on an edit.
      assert.equal(worker.metadata.annotations?.['configmap.reloader.stakater.com/reload'], sidecarPlugin.configMap.name, `${dir}: the workers do not roll when ${sidecarPlugin.configMap.name} changes`);
    }
    const generated = out.filter(o => o.kind === 'ConfigMap' && o.metadata.name.startsWith('cmp-offload-plugin'));
    assert.equal(generated.length, dir.startsWith('helm') ? 0 : 1, `${dir}: with Helm the base's plugin ConfigMap would be a second truth`);
  }
});

test('the operator kustomization gives the ArgoCD resource\'s sidecar volume the hashed name of the workers\' plugin ConfigMap, so a plugin.yaml change rolls both (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const out = renderKustomize(path.join(EXAMPLES, 'argocd-operator'));
  const cm = out.filter(o => o.kind === 'ConfigMap' && o.metadata.name.startsWith('cmp-offload-plugin'));
  assert.equal(cm.length, 1);
  assert.equal(cm[0]!.data['plugin.yaml'], basePluginYaml());
  const cr = out.find(o => o.kind === 'ArgoCD');
  assert.ok(cr, 'the operator kustomization renders no ArgoCD resource');
  const sidecarVolume = (cr.spec.repo.volumes as Obj[]).find(v => v.name === 'cmp-offload-plugin');
  assert.equal(sidecarVolume?.configMap?.name, cm[0]!.metadata.name, 'the sidecar would read another plugin.yaml than the workers');
  const worker = out.find(o => o.kind === 'Deployment' && o.metadata.name === 'cmp-offload-worker')!;
  assert.equal(worker.spec.template.spec.volumes.find((v: Obj) => v.name === 'plugin-config').configMap.name, cm[0]!.metadata.name);
});
