import assert from 'node:assert/strict';
import type { Obj } from './infra-files.js';

/**
 * What components/git-creds must give the argocd-repo-server pod, as a check the kustomize render,
 * the Helm values and the Operator snippet all pass (git-creds.test.ts, helm-values.test.ts).
 */

export const SIDECAR = 'cmp-offload';
export const REPO_SERVER = 'argocd-repo-server';
/** Argo's default askpass socket (reposerver/askpass): in the repo-server's /tmp, which the sidecar must not share. */
const ARGO_DEFAULT_SOCKET = '/tmp/reposerver-ask-pass.sock';
/** Paths Argo CD writes into the request env (util/git/creds.go, util/cert: ARGOCD_SSH_DATA_PATH, ARGOCD_TLS_DATA_PATH). */
const KNOWN_HOSTS = '/app/config/ssh/ssh_known_hosts';
const TLS_DATA = '/app/config/tls';
const SHM = '/dev/shm';

export const containerOf = (d: Obj, name: string): Obj => {
  const c = d.spec.template.spec.containers.find((x: Obj) => x.name === name);
  assert.ok(c, `${d.metadata.name} has no container ${name}`);
  return c;
};
export const envValue = (c: Obj, name: string) => (c.env as Obj[] | undefined)?.find(e => e.name === name)?.value as string | undefined;
/** The mount that holds `p` (the longest mountPath that is p or one of its parents). */
const mountHolding = (c: Obj, p: string): Obj | undefined =>
  (c.volumeMounts as Obj[])
    .filter(m => p === m.mountPath || p.startsWith(`${m.mountPath.replace(/\/$/, '')}/`))
    .sort((a, b) => b.mountPath.length - a.mountPath.length)[0];

/**
 * Throws unless the pod lets the sidecar use a provideGitCreds request's env as it is: every path
 * it names resolves to the same volume in both containers, read-only in the sidecar; the askpass
 * socket is not in the repo-server's /tmp, and the sidecar's /tmp is its own.
 */
export function assertGitCredsPod(d: Obj, what = d.metadata.name): void {
  const pod = d.spec.template.spec;
  const repo = containerOf(d, REPO_SERVER);
  const side = containerOf(d, SIDECAR);
  const volume = (name: string): Obj => {
    const v = (pod.volumes as Obj[]).find(x => x.name === name);
    assert.ok(v, `${what}: volume ${name} is not declared`);
    return v;
  };
  for (const c of [repo, side]) for (const m of c.volumeMounts as Obj[]) volume(m.name);
  const names = (pod.volumes as Obj[]).map(v => v.name);
  assert.equal(new Set(names).size, names.length, `${what}: two volumes of one name`);

  const socket = envValue(repo, 'ARGOCD_ASK_PASS_SOCK');
  assert.ok(socket, `${what}: the repo-server's askpass server listens at Argo's default ${ARGO_DEFAULT_SOCKET}, in its /tmp`);
  assert.equal(envValue(side, 'ARGOCD_ASK_PASS_SOCK'), socket, `${what}: the sidecar's ARGOCD_ASK_PASS_SOCK (for requests of Argo CD before 2.13) differs`);
  for (const [p, kind] of [
    [socket, 'askpass socket'],
    [`${SHM}/tmpXXXX`, 'credential files'],
    [KNOWN_HOSTS, 'SSH known hosts'],
    [`${TLS_DATA}/git.example.com`, 'TLS certificates'],
  ] as const) {
    const r = mountHolding(repo, p);
    const s = mountHolding(side, p);
    assert.ok(r, `${what}: the repo-server has no volume at ${p} (${kind})`);
    assert.ok(s, `${what}: the sidecar has no volume at ${p} (${kind})`);
    assert.equal(s.name, r.name, `${what}: ${kind}: the sidecar's ${p} is not the repo-server's volume`);
    assert.equal(s.mountPath, r.mountPath, `${what}: ${kind}: mounted at different paths`);
    assert.equal(s.readOnly, true, `${what}: ${kind}: the sidecar mounts ${s.mountPath} writable`);
    assert.equal(s.subPath, undefined, `${what}: ${kind}: a subPath does not follow updates`);
  }
  assert.ok(!mountHolding(repo, socket)!.mountPath.startsWith('/tmp'), `${what}: the askpass socket is in the repo-server's /tmp`);
  // Both containers see one in-memory /dev/shm, sized.
  const shm = volume(mountHolding(side, `${SHM}/x`)!.name);
  assert.equal(shm.emptyDir?.medium, 'Memory', `${what}: /dev/shm is not in memory`);
  assert.ok(shm.emptyDir.sizeLimit, `${what}: /dev/shm has no sizeLimit`);
  assert.equal(volume(mountHolding(side, KNOWN_HOSTS)!.name).configMap?.name, 'argocd-ssh-known-hosts-cm');
  assert.equal(volume(mountHolding(side, `${TLS_DATA}/x`)!.name).configMap?.name, 'argocd-tls-certs-cm');
  // The sidecar's /tmp (its work dirs; plugin code runs there in standalone mode) stays its own.
  const sideTmp = mountHolding(side, '/tmp/x')!;
  const repoTmp = mountHolding(repo, '/tmp/x');
  assert.notEqual(sideTmp.name, repoTmp?.name, `${what}: the sidecar mounts the repo-server's /tmp`);
  assert.ok(volume(sideTmp.name).emptyDir, `${what}: the sidecar's /tmp is not an emptyDir`);
}
