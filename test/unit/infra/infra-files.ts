import fs from 'node:fs';
import path from 'node:path';
import { load, loadAll } from 'js-yaml';
import { REPO_ROOT } from '../../helpers/paths.js';

/** Test helpers over the files of infra/: YAML documents with where they came from. */

export const INFRA = path.join(REPO_ROOT, 'infra');
export const KUSTOMIZE = path.join(INFRA, 'kustomize');

export type Obj = Record<string, any>;
export interface Doc {
  file: string;
  obj: Obj;
}

export function walk(dir: string, ext: RegExp): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p, ext));
    else if (ext.test(e.name)) out.push(p);
  }
  return out.sort();
}

/** base/plugin.yaml: the plugin spec the base's configMapGenerator turns into cmp-offload-plugin-<hash>. */
export const BASE_PLUGIN_YAML = path.join(KUSTOMIZE, 'base/plugin.yaml');
export const basePluginYaml = (): string => fs.readFileSync(BASE_PLUGIN_YAML, 'utf8');

/** Every YAML document under infra/kustomize (kustomizations included; not plugin.yaml, a generator's input). */
export function allDocs(): Doc[] {
  return walk(KUSTOMIZE, /\.ya?ml$/).filter(f => f !== BASE_PLUGIN_YAML).flatMap(file =>
    loadAll(fs.readFileSync(file, 'utf8'))
      .filter(d => d !== null && d !== undefined)
      .map(obj => ({ file: path.relative(KUSTOMIZE, file), obj: obj as Obj })),
  );
}

export const isKustomization = (o: Obj) => o.kind === 'Kustomization' || o.kind === 'Component';

/** Files a kustomization lists as resources or patches (local ones only). */
export function kustomizationFiles(dir: string): { resources: string[]; patches: string[]; components: string[]; generated: string[] } {
  const k = load(fs.readFileSync(path.join(dir, 'kustomization.yaml'), 'utf8')) as Obj;
  const local = (xs: string[] | undefined) => (xs ?? []).filter(x => !/^https?:\/\//.test(x));
  return {
    resources: local(k.resources),
    patches: (k.patches ?? []).map((p: Obj) => p.path).filter(Boolean),
    components: local(k.components),
    generated: (k.configMapGenerator ?? []).flatMap((g: Obj) => (g.files ?? []).map((f: string) => f.replace(/^[^=]*=/, ''))),
  };
}

/** The YAML examples of one section of a docs page (from its heading) that hold `patches`. */
export function documentedPatches(heading: string, page = 'docs/operations.md'): Obj[][] {
  const ops = fs.readFileSync(path.join(REPO_ROOT, page), 'utf8');
  const start = ops.indexOf(heading);
  if (start < 0) throw new Error(`${page} has no section ${heading}`);
  const end = ops.indexOf('\n#', start + 10);
  const section = ops.slice(start, end < 0 ? undefined : end);
  const blocks = [...section.matchAll(/^( *)```yaml\n([\s\S]*?)^\1```/gm)].map(m => m[2]!.replace(new RegExp(`^${m[1]}`, 'gm'), ''));
  return blocks.map(b => load(b) as Obj).filter(o => Array.isArray(o?.patches)).map(o => o.patches);
}

/** The objects of one file (relative to infra/kustomize). */
export function docsOf(rel: string): Obj[] {
  return allDocs()
    .filter(d => d.file === rel)
    .map(d => d.obj);
}

export function one(rel: string, kind: string): Obj {
  const found = docsOf(rel).filter(o => o.kind === kind);
  if (found.length !== 1) throw new Error(`${rel}: expected one ${kind}, found ${found.length}`);
  return structuredClone(found[0]!);
}

/**
 * Strategic merge as kubectl does it for the lists we patch: containers and volumes merge by
 * name, other maps recursively, scalars and other lists replace.
 */
export function strategicMerge(base: Obj, patch: Obj): Obj {
  const out: Obj = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    const b = base[k];
    if (Array.isArray(v) && Array.isArray(b) && v.every(x => x && typeof x === 'object' && 'name' in x)) {
      const merged = b.map(x => ({ ...x }));
      for (const item of v) {
        const i = merged.findIndex(x => x.name === item.name);
        if (i >= 0) merged[i] = strategicMerge(merged[i]!, item);
        else merged.push(item);
      }
      out[k] = merged;
    } else if (v && typeof v === 'object' && !Array.isArray(v) && b && typeof b === 'object' && !Array.isArray(b)) {
      out[k] = strategicMerge(b, v);
    } else out[k] = v;
  }
  return out;
}

/**
 * The shape of Argo CD's own argocd-repo-server Deployment (manifests/base/repo-server) that
 * matters to a plugin sidecar: the copyutil init container filling var-files, the plugins and
 * tmp volumes, the SSH known hosts and TLS certificates the git credential env of a request
 * names (components/git-creds mounts them in the sidecar), and one env entry (patches add to the
 * container's env). The sidecar patch is applied onto it.
 */
export function argoRepoServer(): Obj {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'argocd-repo-server', labels: { 'app.kubernetes.io/name': 'argocd-repo-server' } },
    spec: {
      selector: { matchLabels: { 'app.kubernetes.io/name': 'argocd-repo-server' } },
      template: {
        metadata: { labels: { 'app.kubernetes.io/name': 'argocd-repo-server' } },
        spec: {
          initContainers: [
            {
              name: 'copyutil',
              image: 'quay.io/argoproj/argocd:v3.1.5',
              command: ['/bin/cp', '-n', '/usr/local/bin/argocd', '/var/run/argocd/argocd-cmp-server'],
              volumeMounts: [{ name: 'var-files', mountPath: '/var/run/argocd' }],
            },
          ],
          containers: [
            {
              name: 'argocd-repo-server',
              image: 'quay.io/argoproj/argocd:v3.1.5',
              ports: [{ containerPort: 8081 }, { containerPort: 8084 }],
              env: [
                {
                  name: 'ARGOCD_REPO_SERVER_LOGLEVEL',
                  valueFrom: { configMapKeyRef: { name: 'argocd-cmd-params-cm', key: 'reposerver.log.level', optional: true } },
                },
              ],
              volumeMounts: [
                { name: 'ssh-known-hosts', mountPath: '/app/config/ssh' },
                { name: 'tls-certs', mountPath: '/app/config/tls' },
                { name: 'var-files', mountPath: '/var/run/argocd' },
                { name: 'plugins', mountPath: '/home/argocd/cmp-server/plugins' },
                { name: 'tmp', mountPath: '/tmp' },
              ],
            },
          ],
          volumes: [
            { name: 'ssh-known-hosts', configMap: { name: 'argocd-ssh-known-hosts-cm' } },
            { name: 'tls-certs', configMap: { name: 'argocd-tls-certs-cm' } },
            { name: 'var-files', emptyDir: {} },
            { name: 'plugins', emptyDir: {} },
            { name: 'tmp', emptyDir: {} },
          ],
        },
      },
    },
  };
}
