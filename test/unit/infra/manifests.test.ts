import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { load, loadAll } from 'js-yaml';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { ConfigMap, Service, ServiceAccount } from 'kubernetes-models/v1';
import { Role, RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { ScaledObject, TriggerAuthentication } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { compileOptions, DEFAULT_CONFIG_DIR, DEFAULT_HTTP_ADDR, DEFAULT_SOCKET_DIR } from '../../../cmp/config/options.js';
import { parseGoDuration } from '../../../cmp/go/go-duration.js';
import { parsePluginConfig, socketFileName } from '../../../cmp/config/plugin-config.js';
import { bullmqKey, QUEUE_STATES } from '../../../cmp/observe/queue-depth.js';
import { queueNameOf } from '../../../cmp/queue/keys.js';
import { REPO_ROOT, SOURCE_ROOTS } from '../../helpers/paths.js';
import { kubectlSkip, renderKustomize, requireKubectl } from './kubectl.js';
import { allDocs, argoRepoServer, basePluginYaml, docsOf, documentedPatches, isKustomization, KUSTOMIZE, kustomizationFiles, one, strategicMerge, walk, type Obj } from './infra-files.js';

const MODELS: Record<string, new (o: any) => { validate(): void }> = {
  'apps/v1/Deployment': Deployment,
  'v1/Service': Service,
  'v1/ConfigMap': ConfigMap,
  'v1/ServiceAccount': ServiceAccount,
  'rbac.authorization.k8s.io/v1/Role': Role,
  'rbac.authorization.k8s.io/v1/RoleBinding': RoleBinding,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
  'keda.sh/v1alpha1/ScaledObject': ScaledObject,
  'keda.sh/v1alpha1/TriggerAuthentication': TriggerAuthentication,
};
const PATCHES = new Set([
  'components/repo-server-sidecar/repo-server-patch.yaml',
  'overlays/scale-to-zero/scaledobject-patch.yaml',
  ...['deployment', 'service', 'configmap', 'networkpolicy'].map(k => `components/external-redis/delete-redis-${k}.yaml`),
  ...['redis-sentinel', 'redis-cluster'].flatMap(o => [`overlays/${o}/triggers/scaledobject-patch.yaml`, `overlays/${o}/worker-egress-patch.yaml`]),
  'components/otlp/repo-server-patch.yaml',
  'components/otlp/worker-patch.yaml',
  'components/git-creds/repo-server-patch.yaml',
]);
const OUR_IMAGES = { proxy: 'ghcr.io/cmp-offload/cmp-offload-proxy', worker: 'ghcr.io/cmp-offload/cmp-offload-worker' };
const OTHER_IMAGES = new Set(['redis:7.2']);

const resources = () => allDocs().filter(d => !isKustomization(d.obj) && !PATCHES.has(d.file));
const validate = (o: Obj) => {
  const Model = MODELS[`${o.apiVersion}/${o.kind}`];
  assert.ok(Model, `no schema for ${o.apiVersion} ${o.kind}`);
  new Model(o).validate();
};

/** The worker Deployment and the repo-server with the sidecar patch applied. */
const worker = () => one('base/worker-deployment.yaml', 'Deployment');
const runner = () => worker().spec.template.spec.containers.find((c: Obj) => c.name === 'runner') as Obj;
const patchedRepoServer = () => strategicMerge(argoRepoServer(), one('components/repo-server-sidecar/repo-server-patch.yaml', 'Deployment'));
const sidecar = () => patchedRepoServer().spec.template.spec.containers.find((c: Obj) => c.name === 'cmp-offload') as Obj;
const envOf = (c: Obj): Record<string, string> => Object.fromEntries((c.env ?? []).filter((e: Obj) => 'value' in e).map((e: Obj) => [e.name, e.value]));
const pluginConfig = () => parsePluginConfig(basePluginYaml());
/** The ScaledObject a kustomization renders (its triggers' PLUGIN and DATABASE_INDEX filled in from base/settings.yaml). */
const renderedScaledObject = (dir: string): Obj => {
  const so = renderKustomize(path.join(KUSTOMIZE, dir)).find(o => o.kind === 'ScaledObject');
  assert.ok(so, `${dir} renders no ScaledObject`);
  return so;
};

test('every manifest under infra/kustomize parses and validates against the Kubernetes and KEDA schemas', () => {
  const docs = resources();
  assert.ok(docs.length >= 12, `only ${docs.length} manifests`);
  for (const d of docs) {
    if (d.obj.apiVersion === 'monitoring.coreos.com/v1') continue; // checked below: no schema package
    assert.doesNotThrow(() => validate(d.obj), `${d.file}: ${d.obj.kind}`);
  }
});

test('the schemas do catch a broken manifest (the validation can fail)', () => {
  const bad = worker();
  bad.spec.replicas = 'two';
  assert.throws(() => validate(bad), /replicas must be integer/);
  const so = one('base/worker-scaledobject.yaml', 'ScaledObject');
  delete so.spec.scaleTargetRef;
  assert.throws(() => validate(so), /scaleTargetRef/);
});

test('the patches produce valid objects: the sidecar on Argo CD repo-server and the scale-to-zero ScaledObject', () => {
  assert.doesNotThrow(() => validate(patchedRepoServer()));
  const so = strategicMerge(one('base/worker-scaledobject.yaml', 'ScaledObject'), one('overlays/scale-to-zero/scaledobject-patch.yaml', 'ScaledObject'));
  assert.doesNotThrow(() => validate(so));
  assert.equal(so.spec.minReplicaCount, 0);
  assert.equal(so.spec.advanced.scalingModifiers.activationTarget, '0');
  assert.equal(one('base/worker-scaledobject.yaml', 'ScaledObject').spec.minReplicaCount, 1);
});

test('every kustomization lists files that exist, and every manifest file is listed by one', () => {
  const listed = new Set<string>();
  for (const k of walk(KUSTOMIZE, /^kustomization\.yaml$/)) {
    const dir = path.dirname(k);
    const { resources: res, patches, components, generated } = kustomizationFiles(dir);
    for (const f of [...res, ...patches, ...components, ...generated]) {
      const p = path.resolve(dir, f);
      assert.ok(fs.existsSync(p), `${path.relative(KUSTOMIZE, k)} lists ${f}, which does not exist`);
      listed.add(p);
    }
  }
  for (const f of walk(KUSTOMIZE, /\.ya?ml$/)) {
    if (path.basename(f) === 'kustomization.yaml') continue;
    assert.ok(listed.has(f), `${path.relative(KUSTOMIZE, f)} is in no kustomization`);
  }
});

test('containers use only our two images (each built by a Dockerfile in infra/docker) or the pinned Redis', () => {
  const images = new Set<string>();
  for (const d of [...resources().map(x => x.obj), patchedRepoServer()]) {
    for (const c of d.spec?.template?.spec?.containers ?? []) images.add(c.image);
  }
  images.delete('quay.io/argoproj/argocd:v3.1.5'); // the stub's own
  for (const image of images) {
    assert.ok(Object.values(OUR_IMAGES).includes(image) || OTHER_IMAGES.has(image), `unexpected image ${image}`);
  }
  assert.ok(images.has(OUR_IMAGES.proxy) && images.has(OUR_IMAGES.worker));
  for (const [role, image] of Object.entries(OUR_IMAGES)) {
    const dockerfile = fs.readFileSync(path.join(REPO_ROOT, 'infra/docker', `${role}.Dockerfile`), 'utf8');
    assert.ok(dockerfile.includes(`-t ${image}:`), `${role}.Dockerfile does not build ${image}`);
  }
  // Kustomize pins the tag of every image of ours it uses.
  const pinned = [
    ...(allDocs().find(d => d.file === 'base/kustomization.yaml')!.obj.images ?? []),
    ...(allDocs().find(d => d.file === 'components/repo-server-sidecar/kustomization.yaml')!.obj.images ?? []),
  ].map((i: Obj) => i.name);
  assert.deepEqual(pinned.sort(), Object.values(OUR_IMAGES).sort());
});

test('probes point at the real paths and at the port the process listens on', () => {
  for (const [c, role] of [[worker().spec.template.spec.containers[0], 'worker'], [sidecar(), 'proxy']] as const) {
    const addr = compileOptions(envOf(c), { role }).http;
    assert.ok(addr, `${role}: HTTP is off`);
    const namedPort = (name: string | number) => (typeof name === 'number' ? name : c.ports.find((p: Obj) => p.name === name)?.containerPort);
    assert.equal(c.readinessProbe.httpGet.path, '/readyz');
    assert.equal(c.livenessProbe.httpGet.path, '/healthz');
    assert.equal(namedPort(c.readinessProbe.httpGet.port), addr.port, `${role} readiness port`);
    assert.equal(namedPort(c.livenessProbe.httpGet.port), addr.port, `${role} liveness port`);
    assert.equal(`:${addr.port}`, DEFAULT_HTTP_ADDR[role], `${role} keeps the documented default port`);
  }
});

test('every env name our containers set is one the code reads, and every value is accepted', () => {
  const sources = SOURCE_ROOTS.flatMap(d => walk(path.join(REPO_ROOT, d), /\.ts$/))
    .map(f => fs.readFileSync(f, 'utf8'))
    .join('\n');
  for (const [c, role] of [[worker().spec.template.spec.containers[0], 'worker'], [sidecar(), 'proxy']] as const) {
    for (const e of c.env as Obj[]) {
      assert.match(e.name, /^(CMP_OFFLOAD_|ARGOCD_)/, e.name);
      assert.ok(new RegExp(`\\b${e.name}\\b`).test(sources), `${role} sets ${e.name}, which no code reads`);
      assert.notEqual(e.name, 'CMP_OFFLOAD_SIGNING_KEY', 'the signing key is mounted as a file, never inlined');
    }
    // The key file is mounted from the Secret in the cluster; a stand-in here.
    const keyFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-key-')), 'key');
    fs.writeFileSync(keyFile, 'k'.repeat(32));
    const env = { ...envOf(c), CMP_OFFLOAD_REDIS_URL: 'redis://r:6379', CMP_OFFLOAD_SIGNING_KEY_FILE: keyFile };
    assert.doesNotThrow(() => compileOptions(env, { role }));
    fs.rmSync(path.dirname(keyFile), { recursive: true });
  }
  for (const e of runner().env as Obj[]) assert.ok(new RegExp(`\\b${e.name}\\b`).test(sources), `the runner sets ${e.name}, which no code reads`);
  assert.doesNotThrow(() => compileOptions(envOf(runner()), { role: 'runner' }));
});

test('no Secret with data is shipped: keys are generated at install time', () => {
  for (const d of allDocs()) {
    assert.notEqual(d.obj.kind, 'Secret', `${d.file} ships a Secret`);
    assert.equal(d.obj.secretGenerator, undefined, `${d.file} generates a Secret from a file`);
  }
});

test('terminationGracePeriodSeconds exceeds exec + fatal timeout and the worker stop sequence', () => {
  const spec = worker().spec.template.spec;
  const opts = compileOptions(envOf(spec.containers[0]), { role: 'worker' });
  const grace = spec.terminationGracePeriodSeconds * 1000;
  assert.ok(grace > opts.execTimeoutMs + opts.execFatalTimeoutMs, 'grace <= exec + fatal');
  // worker: close within CMP_OFFLOAD_SHUTDOWN_GRACE, then cancel + 5 s kill wait + 5 s close wait.
  assert.ok(grace > opts.shutdownGraceMs + 10_000, 'grace <= shutdown grace + 10s');
  assert.ok(opts.shutdownGraceMs >= opts.execTimeoutMs + opts.execFatalTimeoutMs, 'running commands may not finish');
  // The sidecar lives in the repo-server pod (default 30 s grace).
  const proxy = compileOptions(envOf(sidecar()), { role: 'proxy' });
  const repoGrace = (patchedRepoServer().spec.template.spec.terminationGracePeriodSeconds ?? 30) * 1000;
  assert.ok(proxy.shutdownGraceMs + 5_000 <= repoGrace, 'the proxy cannot stop within the repo-server grace period');
  assert.equal(parseGoDuration('90s'), 90_000);
});

test('the sidecar runs as uid 999 with the volumes Argo CD requires and a /tmp of its own', () => {
  const pod = patchedRepoServer().spec.template.spec;
  const c = sidecar();
  assert.equal(c.securityContext.runAsUser, 999);
  assert.equal(c.securityContext.runAsNonRoot, true);
  const mount = (p: string) => c.volumeMounts.find((m: Obj) => m.mountPath === p);
  assert.equal(mount('/var/run/argocd')?.name, 'var-files');
  assert.equal(mount(DEFAULT_SOCKET_DIR)?.name, 'plugins');
  assert.equal(compileOptions(envOf(c)).socketDir, DEFAULT_SOCKET_DIR, 'socket dir = the plugins mount');
  const cfg = mount(`${DEFAULT_CONFIG_DIR}/plugin.yaml`);
  assert.equal(cfg?.subPath, 'plugin.yaml');
  const volume = (name: string) => pod.volumes.find((v: Obj) => v.name === name);
  assert.equal(volume(cfg.name)?.configMap?.name, 'cmp-offload-plugin');
  const tmp = mount('/tmp');
  assert.ok(volume(tmp.name)?.emptyDir, '/tmp is an emptyDir');
  const others = pod.containers.filter((x: Obj) => x.name !== c.name).flatMap((x: Obj) => x.volumeMounts ?? []);
  assert.ok(!others.some((m: Obj) => m.name === tmp.name), 'the sidecar /tmp is shared');
  for (const m of c.volumeMounts) assert.ok(volume(m.name), `volume ${m.name} is not defined`);
  // Without ARGOCD_CMP_WORKDIR the work dirs go to the temp dir: the sidecar's /tmp.
  assert.ok(!('ARGOCD_CMP_WORKDIR' in envOf(c)));
  // The plugin ConfigMap the sidecar mounts is the one the base ships and the workers mount.
  assert.ok(worker().spec.template.spec.volumes.some((v: Obj) => v.configMap?.name === 'cmp-offload-plugin'));
});

test('the worker pod is locked down: non-root 999, no privilege escalation, read-only root, resources set', () => {
  const spec = worker().spec.template.spec;
  const c = spec.containers[0];
  assert.equal(spec.securityContext.runAsUser, 999);
  assert.equal(spec.securityContext.runAsNonRoot, true);
  assert.equal(c.securityContext.allowPrivilegeEscalation, false);
  assert.equal(c.securityContext.readOnlyRootFilesystem, true);
  assert.deepEqual(c.securityContext.capabilities.drop, ['ALL']);
  assert.ok(c.resources.requests.cpu && c.resources.requests.memory && c.resources.limits.memory);
  const mounts = c.volumeMounts.map((m: Obj) => m.mountPath);
  assert.ok(mounts.includes('/tmp'), 'a writable dir for fetched tarballs');
  assert.ok(!mounts.includes('/home/argocd'), "the worker runs no plugin: it needs no plugin $HOME");
  assert.equal(compileOptions({ ...envOf(c), CMP_OFFLOAD_SIGNING_KEY_FILE: '' }).configDirPath, DEFAULT_CONFIG_DIR);
});

test('each runner container holds no credential, shares only its own socket with the worker, sees no other PID and runs isolated under cmp-reap --init', () => {
  const spec = worker().spec.template.spec;
  const [w, ...runners] = spec.containers as [Obj, ...Obj[]];
  assert.deepEqual(runners.map(r => r.name), ['runner', 'runner-2']);
  const wo0 = compileOptions({ ...envOf(w), CMP_OFFLOAD_SIGNING_KEY_FILE: '' }, { role: 'worker' });
  assert.equal(wo0.runnerSockets.length, runners.length, 'the worker lists one socket per runner container');
  assert.equal(wo0.concurrency, runners.length, 'one run at a time per runner');
  runners.forEach((r, i) => {
  assert.deepEqual(r.args, ['runner']);
  assert.deepEqual(r.command, ['/app/dist/cmp/exec/cmp-reap', '--init', 'node', '--max-semi-space-size=16', '/app/bin/cmp-offload'], 'PID 1 is the non-dumpable init');
  assert.equal(compileOptions(envOf(r), { role: 'runner' }).runner.isolation, 'isolated');
  assert.deepEqual(compileOptions(envOf(r), { role: 'runner' }).runner.resetDirs, ['/tmp', '/home/argocd'], 'what a run can write is emptied after it');
  assert.equal(r.image, w.image, 'one image serves both containers');
  assert.notEqual(spec.shareProcessNamespace, true, 'a shared PID namespace would expose /proc/<worker>/environ');
  // No credential by env (inline or from a Secret) nor by volume.
  for (const e of r.env as Obj[]) {
    assert.ok(!/^(CMP_OFFLOAD_REDIS_URL|CMP_OFFLOAD_SIGNING_KEY(_FILE)?)$|^REDIS/.test(e.name), `the runner gets ${e.name}`);
    assert.equal(e.valueFrom, undefined, `the runner takes ${e.name} from a Secret or field`);
  }
  assert.equal(r.envFrom, undefined);
  const volume = (name: string) => spec.volumes.find((v: Obj) => v.name === name) as Obj;
  for (const m of r.volumeMounts) {
    assert.ok(volume(m.name), `volume ${m.name} is not defined`);
    assert.equal(volume(m.name).secret, undefined, `the runner mounts the Secret volume ${m.name}`);
    assert.equal(volume(m.name).projected, undefined, `the runner mounts the projected volume ${m.name}`);
  }
  // Shared with the worker: the socket emptyDir, and the plugin.yaml both must read alike.
  const workerVolumes = new Set(w.volumeMounts.map((m: Obj) => m.name));
  const shared = r.volumeMounts.filter((m: Obj) => workerVolumes.has(m.name)).map((m: Obj) => m.name).sort();
  const socketVolume = i === 0 ? 'runner-socket' : `runner-socket-${i + 1}`;
  assert.deepEqual(shared, ['plugin-config', socketVolume].sort());
  assert.ok(volume('plugin-config').configMap, 'the shared config is a ConfigMap (read-only)');
  assert.ok(volume(socketVolume).emptyDir);
  const socket = compileOptions(envOf(r), { role: 'runner' }).runnerSocket!;
  assert.equal(wo0.runnerSockets[i], socket, 'both use one socket path');
  for (const c of [w, r]) {
    const mount = c.volumeMounts.find((m: Obj) => m.name === socketVolume);
    assert.equal(path.dirname(socket), mount.mountPath, `${c.name}: the socket lives in the shared volume`);
    assert.equal(c.volumeMounts.find((m: Obj) => m.name === 'plugin-config').mountPath, `${DEFAULT_CONFIG_DIR}/plugin.yaml`);
  }
  // Restricted Pod Security Standard: non-root (pod level), no escalation, no capabilities, RuntimeDefault seccomp.
  assert.equal(spec.securityContext.runAsNonRoot, true);
  assert.equal(spec.securityContext.seccompProfile.type, 'RuntimeDefault');
  assert.equal(r.securityContext.allowPrivilegeEscalation, false);
  assert.deepEqual(r.securityContext.capabilities.drop, ['ALL']);
  assert.equal(r.securityContext.capabilities.add, undefined);
  assert.notEqual(r.securityContext.privileged, true);
  assert.equal(r.securityContext.readOnlyRootFilesystem, true);
  const mounts = r.volumeMounts.map((m: Obj) => m.mountPath);
  assert.ok(mounts.includes('/tmp') && mounts.includes('/home/argocd'), 'writable work and home dirs');
  assert.ok(r.resources.requests.cpu && r.resources.requests.memory && r.resources.limits.memory);
  // The runner stops like the worker: its grace and the exec timeouts are the worker's.
  const ro = compileOptions(envOf(r), { role: 'runner' });
  const wo = compileOptions({ ...envOf(w), CMP_OFFLOAD_SIGNING_KEY_FILE: '' }, { role: 'worker' });
  assert.deepEqual([ro.shutdownGraceMs, ro.execTimeoutMs, ro.execFatalTimeoutMs], [wo.shutdownGraceMs, wo.execTimeoutMs, wo.execFatalTimeoutMs]);
  assert.equal(ro.http, undefined, 'the runner listens on no port');
  });
  // No volume but the plugin config is mounted in two runners: a run cannot reach another runner's files.
  const mounted = runners.flatMap(r => r.volumeMounts.map((m: Obj) => m.name)).filter((n: string) => n !== 'plugin-config');
  assert.equal(new Set(mounted).size, mounted.length);
});

test('where plugin commands run (runner, sidecar), the traced cache\'s recorder keeps working under RuntimeDefault and the restricted Pod Security Standard', () => {
  // The recorder needs no capability and no privilege: only what restricted allows. What breaks it
  // is a profile other than RuntimeDefault, an added capability (restricted forbids them all but
  // NET_BIND_SERVICE), or a setting that moves the recorder away or turns the cache mode down.
  const workerPod = worker().spec.template.spec;
  const repoPod = patchedRepoServer().spec.template.spec;
  for (const [name, pod, c] of [['runner', workerPod, runner()], ['sidecar', repoPod, sidecar()]] as const) {
    const profile = c.securityContext?.seccompProfile ?? pod.securityContext?.seccompProfile;
    assert.equal(profile?.type, 'RuntimeDefault', `${name}: seccomp profile`);
    assert.equal(c.securityContext.allowPrivilegeEscalation, false, `${name}: no_new_privs (cmp-trace sets it too)`);
    assert.deepEqual(c.securityContext.capabilities.drop, ['ALL'], name);
    assert.equal(c.securityContext.capabilities.add, undefined, `${name}: no capability added (not CAP_SYS_PTRACE either)`);
    assert.equal(c.securityContext.runAsNonRoot ?? pod.securityContext?.runAsNonRoot, true, name);
    assert.notEqual(c.securityContext.privileged, true, name);
    for (const setting of ['CMP_OFFLOAD_CACHE', 'CMP_OFFLOAD_TRACER']) assert.ok(!(setting in envOf(c)), `${name} sets ${setting}`);
    // The probe's temp dir and the trace files live beside the work root: a writable /tmp.
    assert.ok(c.volumeMounts.some((m: Obj) => m.mountPath === '/tmp'), `${name}: writable /tmp`);
  }
  assert.equal(pluginConfig().metadata.annotations?.['cmp-offload.io/cache'], undefined, 'the example plugin keeps the default');
});

test('KEDA scales on the real BullMQ keys of the plugin queue: wait + prioritized + delayed + active (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const so = renderedScaledObject('base');
  const queue = queueNameOf(socketFileName(pluginConfig()));
  const prefix = compileOptions({ CMP_OFFLOAD_REDIS_URL: 'redis://r:6379' }).redis!.prefix;
  const byName = Object.fromEntries(so.spec.triggers.map((t: Obj) => [t.name, t]));
  assert.deepEqual(Object.keys(byName).sort(), Object.keys(QUEUE_STATES).sort(), 'one trigger per queue state the code counts');
  for (const state of Object.keys(QUEUE_STATES) as (keyof typeof QUEUE_STATES)[]) {
    assert.equal(byName[state]?.type, 'redis');
    assert.equal(byName[state].metadata.listName, bullmqKey(prefix, queue, state));
    assert.equal(byName[state].authenticationRef.name, one('base/redis-triggerauthentication.yaml', 'TriggerAuthentication').metadata.name);
  }
  assert.equal(so.spec.advanced.scalingModifiers.formula, 'wait + prioritized + delayed + active');
  const concurrency = envOf(worker().spec.template.spec.containers[0]).CMP_OFFLOAD_CONCURRENCY;
  assert.equal(so.spec.advanced.scalingModifiers.target, concurrency, 'target per pod = worker concurrency');
  assert.equal(so.spec.scaleTargetRef.name, worker().metadata.name);
  assert.equal(one('base/redis-service.yaml', 'Service').metadata.name, 'cmp-offload-redis');
});

/** KEDA's redis scalers' connection parameters a TriggerAuthentication may carry (redis_scaler.go, typed config `authParams`). */
const KEDA_REDIS_AUTH_PARAMS = new Set(['address', 'addresses', 'host', 'hosts', 'port', 'ports', 'username', 'password', 'sentinelUsername', 'sentinelPassword', 'sentinelMaster', 'tls', 'ca', 'cert', 'key', 'keyPassword']);
const CONNECTION_METADATA = ['address', 'addresses', 'host', 'hosts', 'port', 'ports', 'addressFromEnv', 'addressesFromEnv', 'hostFromEnv', 'portFromEnv', 'username', 'password', 'usernameFromEnv', 'passwordFromEnv', 'enableTLS'];

test('KEDA without traps: no replicas on the worker, one Secret for Redis (address, user, password, TLS), an explicit database index, no cluster domain (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  assert.equal(worker().spec.replicas, undefined, 'KEDA owns the replicas: a value here fights the HPA on every sync');
  const auth = one('base/redis-triggerauthentication.yaml', 'TriggerAuthentication');
  const urlRef = worker().spec.template.spec.containers[0].env.find((e: Obj) => e.name === 'CMP_OFFLOAD_REDIS_URL').valueFrom.secretKeyRef;
  const params = Object.fromEntries(auth.spec.secretTargetRef.map((r: Obj) => [r.parameter, r]));
  for (const p of ['address', 'username', 'password', 'tls']) {
    assert.ok(params[p], `the TriggerAuthentication gives KEDA no ${p}`);
    assert.equal(params[p].name, urlRef.name, `${p} comes from another Secret than the workers' URL`);
  }
  for (const p of Object.keys(params)) assert.ok(KEDA_REDIS_AUTH_PARAMS.has(p), `KEDA's redis scaler takes no auth parameter ${p}`);
  assert.equal(sidecar().env.find((e: Obj) => e.name === 'CMP_OFFLOAD_REDIS_URL').valueFrom.secretKeyRef.name, urlRef.name);
  const scaledObjects: [string, Obj][] = [
    ['base', renderedScaledObject('base')],
    ...(['redis-sentinel', 'redis-cluster'] as const).map(o => [o, renderedScaledObject(`overlays/${o}`)] as [string, Obj]),
  ];
  for (const [where, so] of scaledObjects) {
    for (const t of so.spec.triggers) {
      for (const k of CONNECTION_METADATA) assert.equal(t.metadata[k], undefined, `${where} ${t.name}: ${k} belongs in the Secret, not the trigger`);
      // KEDA reads the database index from the trigger only; an implicit 0 hides a URL's /<db>.
      if (t.type !== 'redis-cluster') assert.equal(t.metadata.databaseIndex, '0', `${where} ${t.name}: databaseIndex must be explicit`);
    }
  }
  for (const d of resources()) assert.doesNotMatch(JSON.stringify(d.obj), /\.svc\.cluster\.local|\.svc\b/, `${d.file}: a hard-coded cluster domain`);
});

/**
 * An overlay's patch onto a base object as kustomize applies it to these kinds: KEDA's CRDs
 * and NetworkPolicy lists have no merge key, so a patched list replaces the base's.
 */
function replaceLists(base: Obj, patch: Obj): Obj {
  const out: Obj = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    const b = base[k];
    out[k] = v && typeof v === 'object' && !Array.isArray(v) && b && typeof b === 'object' && !Array.isArray(b) ? replaceLists(b, v) : v;
  }
  return out;
}

const HA_OVERLAYS = { 'redis-sentinel': 'redis-sentinel', 'redis-cluster': 'redis-cluster' } as const;

test('the Sentinel and Cluster overlays scale on the same BullMQ keys with KEDA\'s redis-sentinel / redis-cluster scalers (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const base = renderedScaledObject('base');
  const queue = queueNameOf(socketFileName(pluginConfig()));
  const auth = one('base/redis-triggerauthentication.yaml', 'TriggerAuthentication').metadata.name;
  for (const [overlay, type] of Object.entries(HA_OVERLAYS)) {
    const so = renderedScaledObject(`overlays/${overlay}`);
    assert.doesNotThrow(() => validate(so), overlay);
    assert.deepEqual(so.spec.advanced, base.spec.advanced, `${overlay}: same formula and target`);
    assert.deepEqual(so.spec.triggers.map((t: Obj) => t.name), base.spec.triggers.map((t: Obj) => t.name), overlay);
    // The overlays' comments give the Secret's keys: the URL and, for KEDA, the same hosts as `address`.
    const comment = fs.readFileSync(path.join(KUSTOMIZE, `overlays/${overlay}/kustomization.yaml`), 'utf8');
    const url: string = /^#\s+url: (\S+)/m.exec(comment)?.[1] ?? '';
    const keda: string = /^#\s+address: (\S+)/m.exec(comment)?.[1] ?? '';
    assert.ok(url, `${overlay}: no url in the kustomization's comment`);
    assert.ok(keda, `${overlay}: no address in the kustomization's comment`);
    for (const t of so.spec.triggers) {
      assert.equal(t.type, type, `${overlay} ${t.name}`);
      assert.equal(t.authenticationRef.name, auth);
      assert.equal(t.metadata.address ?? t.metadata.addresses, undefined, `${overlay}: an address in the trigger, not the Secret`);
      // The URL form of proxy, worker and CLI, with the same hosts, names the same keys.
      const kedaUrl: string = type === 'redis-sentinel' ? `redis+sentinel://${keda}/${t.metadata.sentinelMaster}` : `redis+cluster://${keda}`;
      const ro = compileOptions({ CMP_OFFLOAD_REDIS_URL: kedaUrl }).redis!;
      assert.equal(ro.target.kind, type === 'redis-sentinel' ? 'sentinel' : 'cluster');
      assert.equal(t.metadata.listName, bullmqKey(ro.prefix, queue, t.name), `${overlay} ${t.name}`);
    }
    const target = compileOptions({ CMP_OFFLOAD_REDIS_URL: url.replace(/<[^>]+>/g, 'x').replace('[x:]', '') }).redis!.target;
    const hosts = (target.kind === 'sentinel' ? target.sentinels : target.kind === 'cluster' ? target.nodes : []).map(h => `${h.host}:${h.port}`);
    if (type === 'redis-cluster') assert.ok(hosts.every(h => keda.split(',').includes(h)), `${overlay}: ${hosts}`);
    else assert.equal(hosts.join(','), keda, overlay);
  }
});

test('the Sentinel and Cluster overlays remove the bundled Redis and let workers reach only the external one and DNS', () => {
  const component = kustomizationFiles(path.join(KUSTOMIZE, 'components/external-redis'));
  const deleted = component.patches.map(p => docsOf(`components/external-redis/${p}`)[0]!);
  assert.deepEqual(deleted.map(d => [d.kind, d.metadata.name, d.$patch]).sort(), [
    ['ConfigMap', 'cmp-offload-redis', 'delete'],
    ['Deployment', 'cmp-offload-redis', 'delete'],
    ['NetworkPolicy', 'cmp-offload-redis', 'delete'],
    ['Service', 'cmp-offload-redis', 'delete'],
  ]);
  const base = one('base/worker-networkpolicy.yaml', 'NetworkPolicy');
  const dns = base.spec.egress[1];
  for (const overlay of Object.keys(HA_OVERLAYS)) {
    const components = kustomizationFiles(path.join(KUSTOMIZE, `overlays/${overlay}`)).components;
    assert.deepEqual(components.slice(0, 3), ['../../components/external-redis', 'triggers', '../../components/plugin-queue']);
    const np = replaceLists(base, one(`overlays/${overlay}/worker-egress-patch.yaml`, 'NetworkPolicy'));
    assert.doesNotThrow(() => validate(np), overlay);
    assert.deepEqual(np.spec.ingress, base.spec.ingress, `${overlay}: ingress unchanged`);
    assert.equal(np.spec.egress.length, 2, overlay);
    assert.deepEqual(np.spec.egress[1], dns, `${overlay}: DNS as in the base`);
    const ports = np.spec.egress[0].ports.map((p: Obj) => p.port as number).sort((a: number, b: number) => a - b);
    assert.deepEqual(ports, overlay === 'redis-sentinel' ? [6379, 26379] : [6379], overlay);
    assert.notDeepEqual(np.spec.egress[0].to, base.spec.egress[0].to, `${overlay}: still points at the bundled Redis`);
  }
});

test('Redis runs noeviction and requires a password; its policy lets only workers, repo-server and KEDA reach it', () => {
  assert.match(one('base/redis-configmap.yaml', 'ConfigMap').data['redis.conf'], /^maxmemory-policy noeviction$/m);
  const redisNp = one('base/redis-networkpolicy.yaml', 'NetworkPolicy');
  assert.equal(redisNp.spec.ingress.length, 1);
  const from = redisNp.spec.ingress[0].from.map((f: Obj) => f.podSelector?.matchLabels?.['app.kubernetes.io/name'] ?? f.namespaceSelector?.matchLabels?.['kubernetes.io/metadata.name']);
  assert.deepEqual(from.sort(), ['argocd-repo-server', 'cmp-offload-worker', 'keda']);
  // The network admits whole pods (plugin code included): the password is what keeps plugins out.
  const redis = one('base/redis-deployment.yaml', 'Deployment').spec.template.spec.containers[0];
  const i = redis.command.indexOf('--requirepass');
  assert.ok(i > 0, 'redis-server runs without --requirepass');
  assert.equal(redis.command[i + 1], '$(REDIS_PASSWORD)');
  assert.deepEqual(redis.env.find((e: Obj) => e.name === 'REDIS_PASSWORD')?.valueFrom, { secretKeyRef: { name: 'cmp-offload-redis', key: 'password' } });
  assert.deepEqual(one('base/worker-pdb.yaml', 'PodDisruptionBudget').spec.selector.matchLabels, worker().spec.selector.matchLabels);
});

/** Pods of this namespace may scrape the ops ports (a documented patch changes the name). */
const MONITORING_NS = 'monitoring';
const fromNamespace = (name: string) => ({ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': name } } });

/** Throws unless the policy's only ingress rule admits TCP `port` from the monitoring namespace alone. */
function assertScrapeOnly(np: Obj, port: number, ns = MONITORING_NS): void {
  assert.deepEqual(np.spec.ingress, [{ from: [fromNamespace(ns)], ports: [{ port, protocol: 'TCP' }] }]);
}

const WORKER_EGRESS = [
  {
    to: [{ podSelector: { matchLabels: { 'app.kubernetes.io/name': 'cmp-offload-redis' } } }],
    ports: [{ port: 6379, protocol: 'TCP' }],
  },
  {
    to: [{ ...fromNamespace('kube-system'), podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } } }],
    ports: [
      { port: 53, protocol: 'UDP' },
      { port: 53, protocol: 'TCP' },
    ],
  },
];

test('the worker NetworkPolicy: in only scrapes of :9102 from the monitoring namespace, out only Redis :6379 and DNS :53', () => {
  const np = one('base/worker-networkpolicy.yaml', 'NetworkPolicy');
  assert.deepEqual(np.spec.podSelector.matchLabels, worker().spec.selector.matchLabels);
  assert.deepEqual([...np.spec.policyTypes].sort(), ['Egress', 'Ingress'], 'without Egress in policyTypes egress is open');
  assertScrapeOnly(np, 9102);
  const c = worker().spec.template.spec.containers[0];
  assert.equal(c.ports.find((p: Obj) => p.name === 'http')?.containerPort, 9102, 'the policy port is the ops port');
  assert.equal(compileOptions(envOf(c), { role: 'worker' }).http?.port, 9102);
  assert.deepEqual(np.spec.egress, WORKER_EGRESS);
  // The Redis rule selects the bundled Redis pods on the port they listen on.
  const redis = one('base/redis-deployment.yaml', 'Deployment');
  assert.deepEqual(np.spec.egress[0].to[0].podSelector.matchLabels, redis.spec.template.metadata.labels);
  assert.equal(redis.spec.template.spec.containers[0].ports[0].containerPort, 6379);
  // The checks fail on the policy this one replaced (ingress from anywhere, egress open).
  const open = { spec: { policyTypes: ['Ingress'], ingress: [{ ports: [{ port: 9102, protocol: 'TCP' }] }] } };
  assert.throws(() => assertScrapeOnly(open, 9102));
});

test('the proxy metrics NetworkPolicy admits the sidecar\'s :9101 from the monitoring namespace only', () => {
  const np = one('components/repo-server-sidecar/proxy-metrics-networkpolicy.yaml', 'NetworkPolicy');
  assert.deepEqual(np.spec.policyTypes, ['Ingress']);
  const podLabels = patchedRepoServer().spec.template.metadata.labels;
  const selector = Object.entries(np.spec.podSelector.matchLabels as Record<string, string>);
  assert.ok(selector.length > 0, 'the policy selects every pod of the namespace');
  for (const [k, v] of selector) assert.equal(podLabels[k], v, `repo-server pods lack ${k}=${v}`);
  assertScrapeOnly(np, 9101);
  // The sidecar listens on every interface (probes and scrapes use the pod IP) at that port.
  const http = compileOptions(envOf(sidecar()), { role: 'proxy' }).http;
  assert.deepEqual(http, { host: '0.0.0.0', port: 9101 });
  assert.equal(sidecar().ports.find((p: Obj) => p.name === 'cmp-metrics')?.containerPort, 9101);
});

test('the optional worker-egress-https component only adds HTTPS egress for worker pods', () => {
  const { resources: res } = kustomizationFiles(path.join(KUSTOMIZE, 'components/worker-egress-https'));
  assert.deepEqual(res, ['worker-egress-https-networkpolicy.yaml']);
  const np = one('components/worker-egress-https/worker-egress-https-networkpolicy.yaml', 'NetworkPolicy');
  assert.doesNotThrow(() => validate(np));
  assert.deepEqual(np.spec.podSelector.matchLabels, worker().spec.selector.matchLabels);
  assert.deepEqual(np.spec.policyTypes, ['Egress'], 'it must not take part in ingress');
  assert.equal(np.spec.ingress, undefined);
  assert.deepEqual(np.spec.egress, [{ to: [{ ipBlock: { cidr: '0.0.0.0/0' } }, { ipBlock: { cidr: '::/0' } }], ports: [{ port: 443, protocol: 'TCP' }] }]);
  assert.notEqual(np.metadata.name, one('base/worker-networkpolicy.yaml', 'NetworkPolicy').metadata.name, 'it must add a policy, not replace the base one');
});

test('ServiceMonitors select the metrics Services by label and scrape their named ports', () => {
  const services = resources().filter(d => d.obj.kind === 'Service').map(d => d.obj);
  const monitors = resources().filter(d => d.obj.kind === 'ServiceMonitor').map(d => d.obj);
  assert.equal(monitors.length, 2);
  for (const m of monitors) {
    assert.equal(m.apiVersion, 'monitoring.coreos.com/v1');
    const svc = services.find(s => Object.entries(m.spec.selector.matchLabels).every(([k, v]) => s.metadata.labels?.[k] === v));
    assert.ok(svc, `${m.metadata.name} selects no Service`);
    for (const e of m.spec.endpoints) {
      assert.ok(svc.spec.ports.some((p: Obj) => p.name === e.port), `${m.metadata.name}: no port ${e.port}`);
      assert.equal(e.path, '/metrics');
    }
  }
  const proxySvc = services.find(s => s.metadata.name === 'cmp-offload-proxy-metrics')!;
  assert.ok(sidecar().ports.some((p: Obj) => p.name === proxySvc.spec.ports[0].targetPort));
});


test('kubectl kustomize renders the base, the scale-to-zero overlay and the sidecar component (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const render = (dir: string) => loadAll(execFileSync('kubectl', ['kustomize', dir], { encoding: 'utf8' })) as Obj[];
  const find = (objs: Obj[], pred: (o: Obj) => boolean): Obj => {
    const o = objs.find(pred);
    assert.ok(o, 'object not rendered');
    return o;
  };
  const base = render(path.join(KUSTOMIZE, 'base'));
  assert.ok(base.every(o => o.metadata.labels?.['app.kubernetes.io/part-of'] === 'cmp-offload'));
  assert.ok(find(base, o => o.kind === 'Deployment' && o.metadata.name === 'cmp-offload-worker').spec.template.spec.containers[0].image.endsWith(':0.1.0'));
  const zero = render(path.join(KUSTOMIZE, 'overlays/scale-to-zero'));
  assert.equal(find(zero, o => o.kind === 'ScaledObject').spec.minReplicaCount, 0);
  // The component needs Argo CD's repo-server among the resources: a stub stands in for install.yaml.
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-kustomize-'));
  try {
    fs.writeFileSync(path.join(tmp, 'repo-server.yaml'), JSON.stringify(argoRepoServer()));
    const rel = (p: string) => path.relative(tmp, path.join(KUSTOMIZE, p));
    fs.writeFileSync(
      path.join(tmp, 'kustomization.yaml'),
      JSON.stringify({ resources: ['repo-server.yaml', rel('base')], components: [rel('components/repo-server-sidecar'), rel('components/service-monitor')] }),
    );
    const out = render(tmp);
    const repo = find(out, o => o.kind === 'Deployment' && o.metadata.name === 'argocd-repo-server');
    validate(repo);
    const names = repo.spec.template.spec.containers.map((c: Obj) => c.name);
    assert.deepEqual(names.sort(), ['argocd-repo-server', 'cmp-offload']);
    const proxy = find(repo.spec.template.spec.containers, (c: Obj) => c.name === 'cmp-offload');
    assert.equal(proxy.image, `${OUR_IMAGES.proxy}:0.1.0`);
    assert.equal(out.filter(o => o.kind === 'ServiceMonitor').length, 2);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test('kubectl kustomize renders the Sentinel and Cluster overlays (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  for (const [overlay, type] of Object.entries(HA_OVERLAYS)) {
    const out = loadAll(execFileSync('kubectl', ['kustomize', path.join(KUSTOMIZE, `overlays/${overlay}`)], { encoding: 'utf8' })) as Obj[];
    assert.deepEqual(out.filter(o => o.metadata.name === 'cmp-offload-redis').map(o => o.kind), ['TriggerAuthentication'], `${overlay}: only KEDA's credentials are left of the bundled Redis`);
    const so = out.find(o => o.kind === 'ScaledObject')!;
    validate(so);
    assert.deepEqual(so.spec.triggers.map((t: Obj) => t.type), [type, type, type, type]);
    assert.ok(so.spec.triggers.every((t: Obj) => t.metadata.address === undefined && t.metadata.addresses === undefined), overlay);
    const np = out.find(o => o.kind === 'NetworkPolicy' && o.metadata.name === 'cmp-offload-worker')!;
    assert.equal(np.spec.egress.length, 2);
    assert.ok(out.some(o => o.kind === 'Deployment' && o.metadata.name === 'cmp-offload-worker'));
  }
});

test('kubectl kustomize renders the egress component and the documented patches of the network policies (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const patches = documentedPatches('## Network policies', 'docs/security.md');
  assert.equal(patches.length, 2, 'expected the monitoring-namespace and the egress-CIDR examples');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-netpol-'));
  try {
    fs.writeFileSync(path.join(tmp, 'repo-server.yaml'), JSON.stringify(argoRepoServer()));
    const rel = (p: string) => path.relative(tmp, path.join(KUSTOMIZE, p));
    const kustomization = {
      namespace: 'argocd',
      resources: ['repo-server.yaml', rel('base')],
      components: [rel('components/repo-server-sidecar'), rel('components/worker-egress-https')],
      patches: patches.flat(),
    };
    fs.writeFileSync(path.join(tmp, 'kustomization.yaml'), JSON.stringify(kustomization));
    const out = loadAll(execFileSync('kubectl', ['kustomize', tmp], { encoding: 'utf8' })) as Obj[];
    const policies = new Map(out.filter(o => o.kind === 'NetworkPolicy').map(o => [o.metadata.name as string, o]));
    assert.deepEqual([...policies.keys()].sort(), ['cmp-offload-proxy-metrics', 'cmp-offload-redis', 'cmp-offload-worker', 'cmp-offload-worker-egress-https']);
    for (const np of policies.values()) assert.doesNotThrow(() => validate(np), np.metadata.name);
    // One patch moves both scrape rules to kube-prometheus-stack's namespace and leaves the rest.
    assertScrapeOnly(policies.get('cmp-offload-worker')!, 9102, 'kube-prometheus-stack');
    assertScrapeOnly(policies.get('cmp-offload-proxy-metrics')!, 9101, 'kube-prometheus-stack');
    assert.deepEqual(policies.get('cmp-offload-worker')!.spec.egress, WORKER_EGRESS);
    // The other narrows HTTPS egress to given CIDRs.
    const https = policies.get('cmp-offload-worker-egress-https')!;
    assert.deepEqual(https.spec.egress, [{ to: [{ ipBlock: { cidr: '10.20.0.0/16' } }, { ipBlock: { cidr: '203.0.113.7/32' } }], ports: [{ port: 443, protocol: 'TCP' }] }]);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

/** Every Prometheus Operator object we ship (ServiceMonitors, PodMonitors, the PrometheusRule). */
const monitoringObjects = () => resources().filter(d => d.obj.apiVersion === 'monitoring.coreos.com/v1');

test('PodMonitors select the worker and repo-server pods by their template labels and scrape named container ports', () => {
  const monitors = resources().filter(d => d.obj.kind === 'PodMonitor').map(d => d.obj);
  assert.equal(monitors.length, 2);
  const pods = [worker(), patchedRepoServer()];
  for (const m of monitors) {
    const pod: Obj | undefined = pods.find(d => Object.entries(m.spec.selector.matchLabels).every(([k, v]) => d.spec.template.metadata.labels?.[k] === v));
    assert.ok(pod, `${m.metadata.name} selects no pod of ours`);
    for (const e of m.spec.podMetricsEndpoints) {
      const ours: Obj[] = pod.spec.template.spec.containers.filter((c: Obj) => (c.ports ?? []).some((p: Obj) => p.name === e.port));
      assert.equal(ours.length, 1, `${m.metadata.name}: port ${e.port} is not one container's`);
      assert.ok(['worker', 'cmp-offload'].includes(ours[0]!.name), `${m.metadata.name} scrapes ${ours[0]!.name}`);
      assert.equal(e.path, '/metrics');
    }
  }
});

test('every Prometheus Operator object carries the same release label, the one docs/operations.md tells how to change', () => {
  const objs = monitoringObjects();
  assert.deepEqual(objs.map(d => d.obj.kind).sort(), ['PodMonitor', 'PodMonitor', 'PrometheusRule', 'ServiceMonitor', 'ServiceMonitor']);
  const releases = new Set(objs.map(d => d.obj.metadata.labels?.release));
  assert.deepEqual([...releases], ['kube-prometheus-stack'], 'one release label on all');
  const patch = releasePatch();
  assert.equal(patch.target.labelSelector, `release=${[...releases][0]}`);
});

/** The `patches` entry of docs/operations.md#35-prometheus-operator-and-grafana that sets the release label. */
function releasePatch(): Obj {
  const ops = fs.readFileSync(path.join(REPO_ROOT, 'docs/operations.md'), 'utf8');
  const section = ops.slice(ops.indexOf('### 3.5 Prometheus Operator'), ops.indexOf('## 4. Sizing'));
  const yaml = /```yaml\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(yaml, 'docs/operations.md 3.5 has no YAML patch');
  const doc = load(yaml) as Obj;
  assert.equal(doc.patches.length, 1);
  return doc.patches[0];
}

test('the Grafana component generates its ConfigMap from the one dashboard file', () => {
  const k = load(fs.readFileSync(path.join(REPO_ROOT, 'infra/grafana/kustomization.yaml'), 'utf8')) as Obj;
  assert.equal(k.kind, 'Component');
  assert.deepEqual(k.configMapGenerator.map((g: Obj) => [g.name, g.files, g.options.labels]), [
    ['cmp-offload-dashboard', ['cmp-offload-dashboard.json'], { grafana_dashboard: '1' }],
  ]);
  const jsons = walk(path.join(REPO_ROOT, 'infra'), /\.json$/).map(f => path.relative(REPO_ROOT, f));
  assert.deepEqual(jsons, ['infra/grafana/cmp-offload-dashboard.json'], 'one dashboard file, no copy');
});

test('kubectl kustomize renders the monitoring components, the dashboard ConfigMap and the documented release patch (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-kustomize-'));
  try {
    fs.writeFileSync(path.join(tmp, 'repo-server.yaml'), JSON.stringify(argoRepoServer()));
    const rel = (p: string) => path.relative(tmp, path.join(KUSTOMIZE, p));
    const components = [rel('components/repo-server-sidecar'), rel('components/service-monitor'), rel('components/pod-monitor'), rel('components/alerts'), rel('../grafana')];
    const render = (patches: Obj[]) => {
      fs.writeFileSync(path.join(tmp, 'kustomization.yaml'), JSON.stringify({ resources: ['repo-server.yaml', rel('base')], components, patches }));
      return loadAll(execFileSync('kubectl', ['kustomize', tmp], { encoding: 'utf8' })) as Obj[];
    };
    const plain = render([]);
    const cm = plain.find(o => o.kind === 'ConfigMap' && o.metadata.name === 'cmp-offload-dashboard');
    assert.ok(cm, 'no dashboard ConfigMap');
    assert.equal(cm.metadata.labels.grafana_dashboard, '1');
    assert.equal(cm.data['cmp-offload-dashboard.json'], fs.readFileSync(path.join(REPO_ROOT, 'infra/grafana/cmp-offload-dashboard.json'), 'utf8'));
    const patch = releasePatch();
    const patched = render([patch]).filter(o => o.apiVersion === 'monitoring.coreos.com/v1');
    assert.deepEqual(patched.map(o => o.kind).sort(), ['PodMonitor', 'PodMonitor', 'PrometheusRule', 'ServiceMonitor', 'ServiceMonitor']);
    const wanted = (load(patch.patch) as Obj[])[0]!.value;
    for (const o of patched) assert.equal(o.metadata.labels.release, wanted, `${o.kind} ${o.metadata.name}`);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

/**
 * A plugin.yaml change rolls proxy, worker and runners out together: the base generates the
 * ConfigMap under a name hashed from plugin.yaml, and kustomize writes that name into every
 * volume that references it (the worker pod's, the repo-server sidecar's).
 */
function pluginConfigMapNames(pluginYamlText: string): Record<string, string> {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-rollout-'));
  try {
    fs.cpSync(KUSTOMIZE, path.join(tmp, 'kustomize'), { recursive: true });
    fs.writeFileSync(path.join(tmp, 'kustomize/base/plugin.yaml'), pluginYamlText);
    fs.mkdirSync(path.join(tmp, 'install'));
    fs.writeFileSync(path.join(tmp, 'install/repo-server.yaml'), JSON.stringify(argoRepoServer()));
    fs.writeFileSync(
      path.join(tmp, 'install/kustomization.yaml'),
      JSON.stringify({ resources: ['repo-server.yaml', '../kustomize/base'], components: ['../kustomize/components/repo-server-sidecar'] }),
    );
    const out = renderKustomize(path.join(tmp, 'install'));
    const podVolumes = (name: string) => out.find(o => o.kind === 'Deployment' && o.metadata.name === name)!.spec.template.spec as Obj;
    const readerOf = (pod: Obj, container: string): string => {
      const mount = (pod.containers as Obj[]).find(c => c.name === container)!.volumeMounts.find((m: Obj) => m.subPath === 'plugin.yaml');
      return (pod.volumes as Obj[]).find(v => v.name === mount.name)!.configMap.name;
    };
    const workerPod = podVolumes('cmp-offload-worker');
    const repoPod = podVolumes('argocd-repo-server');
    const generated = out.filter(o => o.kind === 'ConfigMap' && o.metadata.name.startsWith('cmp-offload-plugin'));
    assert.equal(generated.length, 1);
    assert.equal(generated[0]!.data['plugin.yaml'], pluginYamlText);
    return {
      configMap: generated[0]!.metadata.name,
      proxy: readerOf(repoPod, 'cmp-offload'),
      worker: readerOf(workerPod, 'worker'),
      runner: readerOf(workerPod, 'runner'),
      'runner-2': readerOf(workerPod, 'runner-2'),
    };
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

test('a changed plugin.yaml changes the ConfigMap name that proxy, worker and runners read, so their pods roll out (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const before = pluginConfigMapNames(basePluginYaml());
  const after = pluginConfigMapNames(basePluginYaml().replace('tail -n 1', 'tail -n 2'));
  for (const names of [before, after]) {
    assert.match(names.configMap!, /^cmp-offload-plugin-[a-z0-9]{10}$/, 'no hash suffix');
    for (const [reader, name] of Object.entries(names)) assert.equal(name, names.configMap, `${reader} reads another ConfigMap`);
  }
  assert.notEqual(after.configMap, before.configMap, 'an edit of plugin.yaml keeps the ConfigMap name: nothing would roll');
  // The same plugin.yaml gives the same name: an unchanged spec restarts nothing.
  assert.deepEqual(pluginConfigMapNames(basePluginYaml()), before);
});

test('the plugin queue is written once in infra/kustomize (base/settings.yaml) and matches plugin.yaml (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const config = pluginConfig();
  const queue = queueNameOf(socketFileName(config));
  const settings = one('base/settings.yaml', 'ConfigMap');
  assert.equal(settings.metadata.annotations['config.kubernetes.io/local-config'], 'true', 'the settings object must never be applied');
  assert.equal(settings.data.plugin, queue, 'settings.yaml names another queue than plugin.yaml');
  // plugin.yaml has the name (and version) by nature; besides it, only settings.yaml has them.
  const files = walk(KUSTOMIZE, /\.ya?ml$/).map(f => path.relative(KUSTOMIZE, f));
  const naming = (needle: string) => files.filter(f => fs.readFileSync(path.join(KUSTOMIZE, f), 'utf8').includes(needle));
  assert.deepEqual(naming(queue), ['base/settings.yaml']);
  assert.deepEqual(naming(config.metadata.name).sort(), ['base/plugin.yaml', 'base/settings.yaml']);
  // And it reaches every trigger of every ScaledObject render, whatever the Redis.
  for (const dir of ['base', 'overlays/scale-to-zero', 'overlays/redis-sentinel', 'overlays/redis-cluster']) {
    const so = renderedScaledObject(dir);
    for (const t of so.spec.triggers) {
      assert.equal(t.metadata.listName.split(':')[1], queue, `${dir} ${t.name}`);
      assert.doesNotMatch(JSON.stringify(t), /PLUGIN|DATABASE_INDEX/, `${dir} ${t.name}: a placeholder left`);
    }
  }
  assert.equal(renderKustomize(path.join(KUSTOMIZE, 'base')).filter(o => o.metadata.name === 'cmp-offload-settings').length, 0, 'the settings object is rendered');
});

test('the worker pod\'s run settings are written once (base/settings.yaml) and reach the worker and both runners (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const RUN = { execTimeout: 'ARGOCD_EXEC_TIMEOUT', execFatalTimeout: 'ARGOCD_EXEC_FATAL_TIMEOUT', shutdownGrace: 'CMP_OFFLOAD_SHUTDOWN_GRACE' } as const;
  const settings = one('base/settings.yaml', 'ConfigMap').data as Record<string, string>;
  const rendered = (root: string) => renderKustomize(path.join(root, 'base')).find(o => o.kind === 'Deployment' && o.metadata.name === 'cmp-offload-worker')!;
  const valuesIn = (deployment: Obj) =>
    (deployment.spec.template.spec.containers as Obj[]).map(c => [c.name, Object.fromEntries(Object.values(RUN).map(n => [n, envOf(c)[n]]))]);
  const expected = (s: Record<string, string>) => ['worker', 'runner', 'runner-2'].map(c => [c, Object.fromEntries(Object.entries(RUN).map(([k, n]) => [n, s[k]]))]);
  // The raw file holds the same values, so the tests above that read it check what is installed.
  assert.deepEqual(valuesIn(worker()), expected(settings));
  assert.deepEqual(valuesIn(rendered(KUSTOMIZE)), expected(settings));
  // An edit of settings.yaml alone reaches all three containers.
  const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-kustomize-'));
  try {
    fs.cpSync(KUSTOMIZE, copy, { recursive: true });
    const edited = { execTimeout: '120s', execFatalTimeout: '20s', shutdownGrace: '150s' };
    let text = fs.readFileSync(path.join(copy, 'base/settings.yaml'), 'utf8');
    for (const [k, v] of Object.entries(edited)) text = text.replace(new RegExp(`^  ${k}: .*$`, 'm'), `  ${k}: ${v}`);
    fs.writeFileSync(path.join(copy, 'base/settings.yaml'), text);
    assert.deepEqual(valuesIn(rendered(copy)), expected({ ...settings, ...edited }));
  } finally {
    fs.rmSync(copy, { recursive: true, force: true });
  }
});
