import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { chunksOf, repoMetadata, type CmpTestClient } from './grpc-client.js';
import { packRepo } from './repo.js';

/**
 * A monorepo as the traced cache meets it: `apps/aNN/` per Application, a shared `base/` that
 * every fifth app references (through `base.ref`), and files no plugin reads (README, docs).
 * Also used by the storm-whole-repo and trace-overhead benchmarks. With `layered`, also what
 * {@link LAYERED_PLUGIN} reads beyond that: see {@link layeredFiles}.
 */
export function monorepoFiles(apps: number, opts: { layered?: boolean } = {}): Record<string, string> {
  const files: Record<string, string> = {
    'README.md': 'monorepo\n',
    'docs/guide.md': 'guide\n',
    'base/common.yaml': 'common: 1\n',
    'base/labels.yaml': 'team: core\n',
  };
  for (let i = 1; i <= apps; i++) {
    const app = appName(i);
    files[`apps/${app}/config.yaml`] = `replicas: ${i}\n`;
    files[`apps/${app}/service.yaml`] = `port: ${8000 + i}\n`;
    if (usesBase(i)) files[`apps/${app}/base.ref`] = '../../base\n';
  }
  return opts.layered ? { ...files, ...layeredFiles(apps) } : files;
}

/**
 * A base that includes another one, as kustomize bases do (`bases/team/`, read by apps 2, 12,
 * 22..., includes `base/`), and two chart-like trees (`charts/web/`, `charts/worker/`: a
 * Chart.yaml, values and nested templates) that apps 3, 15, 27... use through `chart.ref`.
 */
function layeredFiles(apps: number): Record<string, string> {
  const files: Record<string, string> = {
    'bases/team/labels.yaml': 'team: payments\n',
    'bases/team/base.ref': '../../base\n',
  };
  for (const chart of ['web', 'worker']) {
    files[`charts/${chart}/Chart.yaml`] = `name: ${chart}\n`;
    files[`charts/${chart}/values.yaml`] = 'image: nginx\n';
    files[`charts/${chart}/templates/deployment.yaml`] = 'kind: Deployment\n';
    files[`charts/${chart}/templates/_helpers.tpl`] = 'helpers: 1\n';
  }
  files['charts/web/templates/service.yaml'] = 'kind: Service\n';
  files['charts/web/templates/monitoring/rule.yaml'] = 'kind: PrometheusRule\n';
  for (let i = 1; i <= apps; i++) {
    const app = appName(i);
    if (i % 10 === 2) files[`apps/${app}/base.ref`] = '../../bases/team\n';
    if (i % 12 === 3) files[`apps/${app}/chart.ref`] = `../../charts/${i % 24 === 3 ? 'web' : 'worker'}\n`;
  }
  return files;
}

export function appName(i: number): string {
  return `a${String(i).padStart(2, '0')}`;
}

/** Apps 5, 10, 15... read base/. */
export function usesBase(i: number): boolean {
  return i % 5 === 0;
}

/**
 * A kustomize-like plugin in plain sh: lists its app dir and prints every YAML file in it
 * (with whether it is executable), follows `base.ref` to list and print the shared base, and
 * appends the app name to $COUNTER (outside the tree) on every run.
 */
export const KUSTOMIZE_LIKE = `generate:
  command: [sh, -c]
  args:
    - |
      echo "$ARGOCD_APP_NAME" >> "$COUNTER"
      for f in $(ls | sort); do
        case "$f" in *.yaml) printf -- '---\\nsrc: %s\\n' "$f"; [ -x "$f" ] && echo 'x: true'; cat "$f";; esac
      done
      if [ -f base.ref ]; then
        b=$(cat base.ref)
        for f in "$b"/*.yaml; do [ -f "$f" ] && { printf -- '---\\nbase: %s\\n' "\${f##*/}"; cat "$f"; }; done
      fi
      true`;

/**
 * {@link KUSTOMIZE_LIKE}, also following a base's own `base.ref` (one level: relative to that
 * base) and rendering a chart-like tree named by `chart.ref`: its Chart.yaml and values.yaml if
 * present, and every file under its templates/, found with `find` (one awk prints them all).
 */
export const LAYERED_PLUGIN = KUSTOMIZE_LIKE.replace(
  '      fi\n      true',
  `        if [ -f "$b/base.ref" ]; then
          n="$b/$(cat "$b/base.ref")"
          for f in "$n"/*.yaml; do [ -f "$f" ] && { printf -- '---\\nbase2: %s\\n' "\${f##*/}"; cat "$f"; }; done
        fi
      fi
      if [ -f chart.ref ]; then
        c=$(cat chart.ref)
        { for f in "$c/Chart.yaml" "$c/values.yaml"; do [ -f "$f" ] && echo "$f"; done; [ -d "$c/templates" ] && find "$c/templates" -type f | sort; } |
          xargs -r awk -v c="$c" 'FNR == 1 { print "---"; print "chart: " substr(FILENAME, length(c) + 2) } 1'
      fi
      true`,
);

/** The same plugin, printing the revision into its output as kpt does. */
export const PRINTS_REVISION = `${KUSTOMIZE_LIKE.replace('      true', "      printf -- '---\\nrev: \"%s\"\\n' \"$ARGOCD_APP_REVISION\"")}`;

/** Revision values of a commit number, as Argo fills them. */
export function revisionEnv(commit: number): Array<{ name: string; value: string }> {
  const sha = createHash('sha1').update(`commit ${commit}`).digest('hex');
  return [
    { name: 'ARGOCD_APP_REVISION', value: sha },
    { name: 'ARGOCD_APP_REVISION_SHORT', value: sha.slice(0, 7) },
    { name: 'ARGOCD_APP_REVISION_SHORT_8', value: sha.slice(0, 8) },
  ];
}

/** Pack a checkout and ask for one app's manifests, whole repo sent, as the repo-server does by default (source path `apps/NAME`). */
export async function generateApp(client: CmpTestClient, tgz: Buffer, app: string, commit: number, counter: string) {
  return client.generate({
    metadata: repoMetadata(tgz, {
      appName: app,
      appRelPath: `apps/${app}`,
      env: [{ name: 'ARGOCD_APP_NAME', value: app }, { name: 'ARGOCD_APP_SOURCE_PATH', value: `apps/${app}` }, { name: 'COUNTER', value: counter }, ...revisionEnv(commit)],
    }),
    chunks: chunksOf(tgz, 64 * 1024),
  });
}

/** Write `files` and the symlinks `links` (path → raw target) into `dir` (a fresh checkout) and pack it. */
export async function checkout(dir: string, files: Record<string, string>, modes: Record<string, number> = {}, links: Record<string, string> = {}): Promise<Buffer> {
  fs.rmSync(dir, { recursive: true, force: true });
  for (const [rel, content] of Object.entries(files)) {
    const p = path.join(dir, rel);
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, content);
    fs.chmodSync(p, modes[rel] ?? 0o644);
  }
  for (const [rel, target] of Object.entries(links)) {
    fs.mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    fs.symlinkSync(target, path.join(dir, rel));
  }
  return packRepo(dir);
}

/** Lines appended to a counter file so far. */
export function countRuns(counter: string): string[] {
  return fs.existsSync(counter) ? fs.readFileSync(counter, 'utf8').split('\n').filter(Boolean) : [];
}
