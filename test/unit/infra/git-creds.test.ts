import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Deployment } from 'kubernetes-models/apps/v1';
import { REPO_ROOT } from '../../helpers/paths.js';
import { argoRepoServer, docsOf, KUSTOMIZE, kustomizationFiles, one, strategicMerge, type Obj } from './infra-files.js';
import { kubectlSkip, renderWithComponents, requireKubectl } from './kubectl.js';
import { assertGitCredsPod, containerOf, envValue, REPO_SERVER, SIDECAR } from './git-creds-pod.js';

/**
 * The optional git-creds component (infra/kustomize/components/git-creds): what the git
 * credential env of a provideGitCreds request names in the argocd-repo-server container — its
 * askpass socket, the credential files under /dev/shm, the SSH known hosts and the TLS
 * certificates — exists at the same path in the cmp-offload sidecar, read-only there, while the
 * sidecar keeps a /tmp of its own.
 */

const COMPONENT = 'components/git-creds';
const PATCH = `${COMPONENT}/repo-server-patch.yaml`;

/** The sidecar component's patch, then this one, onto Argo's repo-server (kubectl's merge for these lists). */
const patched = () =>
  strategicMerge(strategicMerge(argoRepoServer(), one('components/repo-server-sidecar/repo-server-patch.yaml', 'Deployment')), one(PATCH, 'Deployment'));

test('the git-creds component: one patch of argocd-repo-server; the sidecar sees the request env\'s paths at the same place, read-only, and keeps its own /tmp', () => {
  const files = kustomizationFiles(path.join(KUSTOMIZE, COMPONENT));
  assert.deepEqual(files, { resources: [], patches: ['repo-server-patch.yaml'], components: [], generated: [] });
  const k = docsOf(`${COMPONENT}/kustomization.yaml`)[0]!;
  assert.equal(k.kind, 'Component');
  assert.deepEqual(k.patches[0].target, { group: 'apps', version: 'v1', kind: 'Deployment', name: REPO_SERVER });
  const d = patched();
  assert.doesNotThrow(() => new Deployment(d as any).validate());
  assertGitCredsPod(d);
  // It patches the two containers and adds two volumes, nothing else.
  const patch = one(PATCH, 'Deployment');
  assert.deepEqual(Object.keys(patch.spec.template.spec).sort(), ['containers', 'volumes']);
  assert.deepEqual(patch.spec.template.spec.containers.map((c: Obj) => c.name), [REPO_SERVER, SIDECAR]);
  assert.deepEqual(patch.spec.template.spec.volumes.map((v: Obj) => v.name).sort(), ['dev-shm', 'git-askpass']);
  for (const c of patch.spec.template.spec.containers) assert.deepEqual(Object.keys(c).sort(), ['env', 'name', 'volumeMounts'], c.name);
  // Without it the sidecar sees none of it (the checks can fail).
  const plain = strategicMerge(argoRepoServer(), one('components/repo-server-sidecar/repo-server-patch.yaml', 'Deployment'));
  assert.throws(() => assertGitCredsPod(plain), /askpass server listens at Argo's default/);
  // Sharing the repo-server's /tmp, or a writable socket volume, fails them too.
  const sharedTmp = structuredClone(d);
  containerOf(sharedTmp, SIDECAR).volumeMounts.find((m: Obj) => m.mountPath === '/tmp').name = 'tmp';
  assert.throws(() => assertGitCredsPod(sharedTmp), /mounts the repo-server's \/tmp/);
  const writable = structuredClone(d);
  delete containerOf(writable, SIDECAR).volumeMounts.find((m: Obj) => m.name === 'git-askpass').readOnly;
  assert.throws(() => assertGitCredsPod(writable), /askpass socket: the sidecar mounts .* writable/);
});

test('overlays/argocd lists the git-creds component, commented out, after repo-server-sidecar', () => {
  const text = fs.readFileSync(path.join(KUSTOMIZE, 'overlays/argocd/kustomization.yaml'), 'utf8');
  const sidecar = text.indexOf('  - ../../components/repo-server-sidecar');
  const gitCreds = text.search(/^ *# - \.\.\/\.\.\/components\/git-creds$/m);
  assert.ok(sidecar >= 0 && gitCreds > sidecar, 'expected `# - ../../components/git-creds` after repo-server-sidecar');
});

test('the operations guide (section 9) gives the component\'s socket path, its sidecar mounts as the component has them, and names the Helm and Operator files', () => {
  const ops = fs.readFileSync(path.join(REPO_ROOT, 'docs/operations.md'), 'utf8');
  const start = ops.indexOf('\n## 9. provideGitCreds\n');
  assert.ok(start > 0, 'docs/operations.md has no section "9. provideGitCreds"');
  const end = ops.indexOf('\n## ', start + 5);
  const section = ops.slice(start, end < 0 ? undefined : end);
  const patch = one(PATCH, 'Deployment');
  const socket = envValue(containerOf(patch, REPO_SERVER), 'ARGOCD_ASK_PASS_SOCK')!;
  for (const s of [`ARGOCD_ASK_PASS_SOCK=${socket}`, 'components/git-creds', 'examples/helm/values-git-creds.yaml', 'examples/argocd-operator/argocd-git-creds.yaml']) {
    assert.ok(section.includes(s), `section 9 does not mention ${s}`);
  }
  for (const f of ['examples/helm/values-git-creds.yaml', 'examples/argocd-operator/argocd-git-creds.yaml']) assert.ok(fs.existsSync(path.join(REPO_ROOT, f)), f);
  // The table of 9.1: one row per sidecar mount, path and volume as the patch has them.
  const rows = [...section.matchAll(/^\| `(\/[^`]+)` \| [^|]*?`([a-z-]+)`/gm)].map(m => `${m[1]} ${m[2]}`).sort();
  const mounts = (containerOf(patch, SIDECAR).volumeMounts as Obj[]).map(m => `${m.mountPath} ${m.name}`).sort();
  assert.deepEqual(rows, mounts, 'the mounts table of section 9.1 differs from the component');
  const size = patch.spec.template.spec.volumes.find((v: Obj) => v.name === 'dev-shm').emptyDir.sizeLimit;
  assert.ok(section.includes(`sizeLimit: ${size}`), `section 9 does not give /dev/shm's sizeLimit ${size}`);
});

test('kubectl kustomize renders the git-creds component onto Argo\'s repo-server after repo-server-sidecar (kubectl 1.21+; skipped without it outside CI)', { skip: kubectlSkip }, () => {
  requireKubectl();
  const out = renderWithComponents([argoRepoServer()], ['components/repo-server-sidecar', COMPONENT]);
  const repo = out.find(o => o.kind === 'Deployment' && o.metadata.name === REPO_SERVER);
  assert.ok(repo, 'no argocd-repo-server rendered');
  assert.doesNotThrow(() => new Deployment(repo as any).validate());
  assertGitCredsPod(repo, 'rendered');
  // Argo's own mounts, env and volumes are kept; the patch adds to them.
  const stub = argoRepoServer().spec.template.spec;
  const r = containerOf(repo, REPO_SERVER);
  for (const m of stub.containers[0].volumeMounts) assert.ok(r.volumeMounts.some((x: Obj) => x.name === m.name && x.mountPath === m.mountPath), `lost the repo-server's ${m.mountPath}`);
  for (const e of stub.containers[0].env) assert.ok(r.env.some((x: Obj) => x.name === e.name), `lost the repo-server's ${e.name}`);
  for (const v of stub.volumes) assert.ok(repo.spec.template.spec.volumes.some((x: Obj) => x.name === v.name), `lost the volume ${v.name}`);
  // The offline merge of the tests above is what kubectl renders, but for the order of merged lists
  // (kustomize puts a patch's new entries first), the image tag the component pins and the volumes,
  // compared by name (js-yaml reads the signing key's defaultMode 0400 as 400).
  const offline = patched();
  containerOf(offline, SIDECAR).image = containerOf(repo, SIDECAR).image;
  const unordered = (cs: Obj[]) =>
    cs.map(c => ({
      ...c,
      env: [...c.env].sort((a, b) => a.name.localeCompare(b.name)),
      volumeMounts: [...c.volumeMounts].sort((a, b) => a.mountPath.localeCompare(b.mountPath)),
    }));
  assert.deepEqual(unordered(repo.spec.template.spec.containers), unordered(offline.spec.template.spec.containers));
  const volumeNames = (d: Obj) => d.spec.template.spec.volumes.map((v: Obj) => v.name).sort();
  assert.deepEqual(volumeNames(repo), volumeNames(offline));
});
